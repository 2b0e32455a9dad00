/**
 * An OTLP/HTTP trace receiver on 127.0.0.1 for the tracing tests: it takes what the apps' exporters
 * POST to `/v1/traces` (OTLP JSON, OTEL_EXPORTER_OTLP_PROTOCOL=http/json) and keeps every span with
 * the service that sent it. Nothing else (no collector, no Jaeger) is needed on the machine.
 */
import { createServer, type Server } from "node:http";
import { listenOnLoopback } from "./receivers.js";

/** One received span, flattened: ids in hex, attributes as plain values. */
export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  /** "" for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: number;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpAttribute[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number };
}
interface OtlpExport {
  resourceSpans?: {
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: { spans?: OtlpSpan[] }[];
  }[];
}

const plain = (v: OtlpValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));

const attributesOf = (list: OtlpAttribute[] | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, plain(a.value)]));

export interface OtlpReceiver {
  /** OTEL_EXPORTER_OTLP_ENDPOINT of the apps. */
  endpoint: string;
  spans: ReceivedSpan[];
  /** Every span of one trace received so far. */
  trace(traceId: string): ReceivedSpan[];
  /** Requests whose body was not OTLP JSON (a test expects none). */
  rejected: number;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const receiver = { rejected: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      try {
        if (req.url !== "/v1/traces" || !req.headers["content-type"]?.startsWith("application/json")) {
          throw new Error("not OTLP JSON");
        }
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpExport;
        for (const rs of body.resourceSpans ?? []) {
          const service = String(attributesOf(rs.resource?.attributes)["service.name"] ?? "");
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              spans.push({
                service,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? "",
                name: s.name,
                kind: s.kind,
                attributes: attributesOf(s.attributes),
                links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
                status: s.status?.code ?? 0,
              });
            }
          }
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      } catch {
        receiver.rejected++;
        res.writeHead(400).end();
      }
    });
  });
  const { port, close } = await listenOnLoopback(server);
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    trace: (traceId) => spans.filter((s) => s.traceId === traceId),
    get rejected() {
      return receiver.rejected;
    },
    close,
  };
}
