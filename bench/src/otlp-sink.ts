/**
 * The OTLP/HTTP receiver of the traced apps (the rows "tracing on ÷ off"): it reads each export
 * whole (protobuf or JSON) and answers 200, parsing nothing, so what tracing costs is the apps' own work (building,
 * batching, serialising and sending spans) and not a collector's. Runs in the bench process.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export interface OtlpSink {
  /** OTEL_EXPORTER_OTLP_ENDPOINT of the traced apps. */
  url: string;
  /** Export requests and bytes received so far. */
  received(): { exports: number; bytes: number };
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  let exports = 0;
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
    });
    req.on("end", () => {
      exports++;
      // An empty ExportTraceServiceResponse: `{}` in JSON, no bytes in protobuf.
      if (req.headers["content-type"]?.startsWith("application/json")) {
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      } else {
        res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      }
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received: () => ({ exports, bytes }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
