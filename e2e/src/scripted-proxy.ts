/**
 * A tiny HTTP proxy on 127.0.0.1 in front of a real app: the first requests are answered from a
 * script (a canned status and body, or a connection reset), every later one is forwarded to the
 * app unchanged. The real API never answers 503 on demand; this lets a client's retry path meet a
 * real 503 (or 429, or a dropped connection) followed by the real API's answer.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { listenOnLoopback } from "./receivers.js";

export type ScriptedAnswer =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | "reset" // destroy the connection before any answer (a network error for the client)
  | "forward";

export interface ProxiedRequest {
  method: string;
  path: string;
  /** What the client got: the scripted status, "reset", or the app's status. */
  answer: number | "reset";
  /** When the request arrived (ms since the epoch). */
  at: number;
}

export interface ScriptedProxy {
  base: string;
  requests: ProxiedRequest[];
  /** Answers for the next requests, in order; requests beyond them are forwarded. */
  script(...answers: ScriptedAnswer[]): void;
  close(): Promise<void>;
}

export async function startScriptedProxy(target: string): Promise<ScriptedProxy> {
  const queue: ScriptedAnswer[] = [];
  const requests: ProxiedRequest[] = [];

  /** Records the app's status before the client can see it, so a test never reads a stale record. */
  const forward = async (req: IncomingMessage, res: ServerResponse, body: Buffer, record: ProxiedRequest) => {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (name === "host" || name === "connection" || value === undefined) continue;
      headers.set(name, Array.isArray(value) ? value.join(", ") : value);
    }
    const answer = await fetch(`${target}${req.url ?? "/"}`, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
      signal: AbortSignal.timeout(15_000),
    });
    const bytes = Buffer.from(await answer.arrayBuffer());
    const out: Record<string, string> = {};
    answer.headers.forEach((value, name) => {
      if (name !== "content-length" && name !== "transfer-encoding" && name !== "connection")
        out[name] = value;
    });
    record.answer = answer.status;
    res.writeHead(answer.status, out).end(bytes);
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const next = queue.shift() ?? "forward";
      const record: ProxiedRequest = {
        method: req.method ?? "",
        path: req.url ?? "",
        answer: 0,
        at: Date.now(),
      };
      requests.push(record);
      if (next === "reset") {
        record.answer = "reset";
        req.socket.destroy();
        return;
      }
      if (next !== "forward") {
        record.answer = next.status;
        res.writeHead(next.status, { "content-type": "application/json", ...next.headers });
        res.end(next.body === undefined ? "" : JSON.stringify(next.body));
        return;
      }
      forward(req, res, Buffer.concat(chunks), record).catch(() => {
        record.answer = 502;
        if (!res.headersSent) res.writeHead(502).end();
      });
    });
  });
  const { port, close } = await listenOnLoopback(server);
  return {
    base: `http://127.0.0.1:${port}`,
    requests,
    script: (...answers) => queue.push(...answers),
    close,
  };
}
