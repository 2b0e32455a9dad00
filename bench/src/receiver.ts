/**
 * The bench's local webhook receiver. Paths decide the behaviour, so one receiver serves every
 * scenario: `/hold…` never answers (the dispatcher's attempt runs into its timeout), `/fail…`
 * answers 500 at once, anything else 204. Each path counts unique deliveries (X-Webhook-Delivery)
 * with their receipt times and vote → receipt latency (receipt time minus the body's `voted_at`),
 * also per user-id range: key `<path>@<first digit of user_id>` (the scenarios vote with user ids
 * from distinct ranges, so a phase counts its own votes, not the leftovers of the one before).
 */
import { createServer, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { freePort } from "./procs.js";

interface PathStats {
  seen: Set<string>;
  latencies: number[];
  times: number[];
}

/** Loopback addresses the receiver answers on (BENCH_RECEIVER_ORIGINS; 1 = everything on one origin). */
export const RECEIVER_ORIGINS = Math.max(1, Math.min(250, Number(process.env.BENCH_RECEIVER_ORIGINS ?? 64)));

export interface Receiver {
  base: string;
  /**
   * http://127.0.0.<k>:<port><path>, k = 1 + origin % RECEIVER_ORIGINS: the receiver answers on
   * that many loopback addresses, so bots can have distinct origins (scheme, host, port) as real
   * bots do, instead of all sharing one (which the dispatcher's per-origin cap would throttle).
   */
  url(path?: string, origin?: number): string;
  /** Unique deliveries received on `path` (default `/hook`). */
  received(path?: string): number;
  /** First and last receipt on `path` since the last reset. */
  window(path?: string): { first: number; last: number };
  /** Receipts on `path` with from ≤ time < to. */
  receivedBetween(from: number, to: number, path?: string): number;
  /** Vote → receipt latencies on `path` since the last reset. */
  latencies(path?: string): number[];
  /** Requests answered 500 and requests held open so far (any path). */
  hostile(): { failed: number; held: number };
  reset(path?: string): void;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const stats = new Map<string, PathStats>();
  const of = (path: string): PathStats => {
    let s = stats.get(path);
    if (!s) {
      s = { seen: new Set(), latencies: [], times: [] };
      stats.set(path, s);
    }
    return s;
  };
  const held = new Set<ServerResponse>();
  const sockets = new Set<Socket>();
  let failed = 0;
  let heldTotal = 0;
  const server = createServer((req, res) => {
    const path = req.url ?? "/";
    if (path.startsWith("/hold")) {
      heldTotal++;
      held.add(res);
      res.on("close", () => held.delete(res));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (path.startsWith("/fail")) {
        failed++;
        res.statusCode = 500;
        res.end();
        return;
      }
      const now = Date.now();
      const id = String(req.headers["x-webhook-delivery"]);
      const s = of(path);
      if (!s.seen.has(id)) {
        let body: { voted_at?: string; user_id?: string } = {};
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as typeof body;
        } catch {
          // counted, no latency
        }
        const latency = body.voted_at ? now - Date.parse(body.voted_at) : null;
        const ranged = body.user_id ? [of(`${path}@${body.user_id[0]}`)] : [];
        for (const stat of [s, ...ranged]) {
          stat.seen.add(id);
          stat.times.push(now);
          if (latency !== null) stat.latencies.push(latency);
        }
      }
      res.statusCode = 204;
      res.end();
    });
  });
  const handler = server.listeners("request")[0] as Parameters<typeof createServer>[0];
  // One listener per loopback address (all of 127.0.0.0/8 is loopback on Linux), same port.
  const servers = [server, ...Array.from({ length: RECEIVER_ORIGINS - 1 }, () => createServer(handler))];
  for (const srv of servers) {
    srv.on("connection", (socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
  }
  const port = await freePort();
  for (const [k, srv] of servers.entries()) {
    await new Promise<void>((r) => srv.listen(port, `127.0.0.${k + 1}`, r));
  }
  const base = `http://127.0.0.1:${port}`;
  return {
    base,
    url: (path = "/hook", origin = 0) => `http://127.0.0.${1 + (origin % RECEIVER_ORIGINS)}:${port}${path}`,
    received: (path = "/hook") => of(path).seen.size,
    window(path = "/hook") {
      const times = of(path).times;
      return { first: times[0] ?? 0, last: times.at(-1) ?? 0 };
    },
    receivedBetween: (from, to, path = "/hook") => of(path).times.filter((t) => t >= from && t < to).length,
    latencies: (path = "/hook") => of(path).latencies,
    hostile: () => ({ failed, held: heldTotal }),
    reset(path = "/hook") {
      const s = of(path);
      s.latencies.length = 0;
      s.times.length = 0;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const socket of sockets) socket.destroy();
        let open = servers.length;
        for (const srv of servers) srv.close(() => --open === 0 && r());
      }),
  };
}
