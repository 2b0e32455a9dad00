/**
 * A small TCP proxy for fault tests: in front of a store (PostgreSQL, a Redis node), it forwards
 * bytes both ways and can make the link slow (each chunk held `delayMs`), stall it (nothing passes
 * for a while, then everything held goes through, in order) or cut it (every open connection
 * reset; new ones are still accepted).
 */
import { createServer, type Socket, connect as tcpConnect } from "node:net";
import { freePort } from "./ports.js";

export interface FaultProxy {
  /** The proxy's port on 127.0.0.1. */
  port: number;
  /** The port it forwards to. */
  target: number;
  /** Holds every chunk, both ways, this long from now on (0: none). */
  setDelay(ms: number): void;
  /** Lets nothing through for `ms`, then everything held, in order; resolves when it ends. */
  stall(ms: number): Promise<void>;
  /** Resets every open connection (both sides). */
  cut(): void;
  /** Forwards to another port from the next connection on. */
  retarget(port: number): void;
  /** Connections accepted so far. */
  connections(): number;
  close(): Promise<void>;
}

export async function startFaultProxy(target: number, options: { port?: number } = {}): Promise<FaultProxy> {
  const port = options.port ?? (await freePort());
  let upstreamPort = target;
  let delayMs = 0;
  let stalledUntil = 0;
  let accepted = 0;
  const open = new Set<Socket>();

  /** Forwards from → to, each chunk no earlier than its delay or the stall's end, never reordered. */
  function forward(from: Socket, to: Socket): void {
    let lastAt = 0;
    let queued = 0;
    from.on("data", (chunk: Buffer) => {
      const now = Date.now();
      const at = Math.max(now + delayMs, stalledUntil, lastAt);
      lastAt = at;
      if (at <= now && queued === 0) {
        to.write(chunk);
        return;
      }
      queued++;
      // Back-pressure: a link held this long would not be read from either.
      if (queued > 1000) from.pause();
      setTimeout(() => {
        queued--;
        if (!to.destroyed) to.write(chunk);
        if (queued < 100) from.resume();
      }, at - now);
    });
    from.on("end", () => {
      const wait = Math.max(0, lastAt - Date.now());
      setTimeout(() => to.end(), wait);
    });
  }

  const server = createServer((client) => {
    accepted++;
    const upstream = tcpConnect(upstreamPort, "127.0.0.1");
    open.add(client);
    open.add(upstream);
    const done = () => {
      open.delete(client);
      open.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", done);
    upstream.on("error", done);
    client.on("close", done);
    upstream.on("close", done);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  return {
    port,
    get target() {
      return upstreamPort;
    },
    setDelay(ms) {
      delayMs = ms;
    },
    stall(ms) {
      stalledUntil = Date.now() + ms;
      return new Promise((resolve) => setTimeout(resolve, ms));
    },
    cut() {
      for (const socket of open) socket.resetAndDestroy();
      open.clear();
    },
    retarget(next) {
      upstreamPort = next;
    },
    connections: () => accepted,
    close() {
      for (const socket of open) socket.destroy();
      open.clear();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
