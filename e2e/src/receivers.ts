/**
 * Webhook receivers on 127.0.0.1 for fault tests: a well-behaved one that records what it gets,
 * and hostile ones (slow drip, huge body, connection reset, self-signed certificate).
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import {
  type AddressInfo,
  createServer as createTcpServer,
  type Socket,
  type Server as TcpServer,
} from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  at: number;
  /** The sender's TCP port (which process sent it: AppProcess.ownsConnection). */
  remotePort: number;
}

/** How request number n (1-based, per path) is answered. */
export type Reply = { status: number; location?: string } | "hang";

export interface Receiver {
  port: number;
  url(path?: string): string;
  requests: ReceivedRequest[];
  forPath(path: string): ReceivedRequest[];
  close(): Promise<void>;
}

function closeHttp(server: Server | TcpServer, sockets: Set<Socket>): Promise<void> {
  return new Promise((resolve) => {
    for (const s of sockets) s.destroy();
    server.close(() => resolve());
  });
}

/**
 * Listens on a free loopback port and tracks the server's connections, so `close` ends them
 * (keep-alive sockets included) instead of waiting for clients to let go.
 */
export async function listenOnLoopback(
  server: Server | TcpServer,
): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as AddressInfo).port, close: () => closeHttp(server, sockets) };
}

export async function startReceiver(
  reply: (req: ReceivedRequest, n: number) => Reply = () => ({ status: 204 }),
): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const received = {
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: Date.now(),
        remotePort: req.socket.remotePort ?? 0,
      };
      requests.push(received);
      const answer = reply(received, requests.filter((r) => r.path === received.path).length);
      if (answer === "hang") return;
      if (answer.location) res.setHeader("Location", answer.location);
      res.statusCode = answer.status;
      res.end();
    });
  });
  const { port, close } = await listenOnLoopback(server);
  return {
    port,
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    requests,
    forPath: (path) => requests.filter((r) => r.path === path),
    close,
  };
}

export interface RawServer {
  port: number;
  connections: number;
  /** Bytes the server managed to write (huge-body receiver). */
  bytesWritten: number;
  close(): Promise<void>;
}

/**
 * A TCP server that handles each connection with `onConnection` once the request has started to
 * arrive (so the client is past connect and has sent its request).
 */
async function rawServer(onData: (socket: Socket, state: RawServer) => void): Promise<RawServer> {
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const state: RawServer = { port: 0, connections: 0, bytesWritten: 0, close: async () => {} };
  const server = createTcpServer((socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on("error", () => {});
    socket.once("close", () => sockets.delete(socket));
    socket.once("data", () => onData(socket, state));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.port = (server.address() as AddressInfo).port;
  state.close = () => {
    for (const t of timers) clearInterval(t);
    return closeHttp(server, sockets);
  };
  (state as RawServer & { timers: Set<NodeJS.Timeout> }).timers = timers;
  return state;
}

/** Sends the status line one byte every `everyMs`: the response never completes in time. */
export function startSlowDripReceiver(everyMs = 100): Promise<RawServer> {
  const line = Buffer.from("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Padding: ".padEnd(4000, "x"));
  return rawServer((socket, state) => {
    let i = 0;
    const timer = setInterval(() => {
      if (socket.destroyed || i >= line.length) {
        clearInterval(timer);
        return;
      }
      socket.write(line.subarray(i, i + 1));
      state.bytesWritten++;
      i++;
    }, everyMs);
    (state as RawServer & { timers: Set<NodeJS.Timeout> }).timers.add(timer);
    socket.once("close", () => clearInterval(timer));
  });
}

/**
 * Answers 500 and then streams a body of `totalBytes` (default 1 GiB) as fast as the socket takes
 * it. A client that buffered bodies would grow by that much.
 */
export function startHugeBodyReceiver(totalBytes = 1024 ** 3): Promise<RawServer> {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  return rawServer((socket, state) => {
    socket.write(
      `HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: ${totalBytes}\r\n\r\n`,
    );
    const pump = () => {
      while (!socket.destroyed && state.bytesWritten < totalBytes) {
        state.bytesWritten += chunk.length;
        if (!socket.write(chunk)) {
          socket.once("drain", pump);
          return;
        }
      }
    };
    pump();
  });
}

/** Resets the connection (TCP RST) as soon as the request arrives. */
export function startResettingReceiver(): Promise<RawServer> {
  return rawServer((socket) => socket.resetAndDestroy());
}

export interface TlsReceiver extends Receiver {
  cleanup(): void;
}

/** An https server on 127.0.0.1 with a self-signed certificate made by openssl at test time. */
export async function startSelfSignedReceiver(): Promise<TlsReceiver> {
  const dir = mkdtempSync(join(tmpdir(), "botdir-tls-"));
  const key = join(dir, "key.pem");
  const cert = join(dir, "cert.pem");
  await promisify(execFile)(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { timeout: 30_000 },
  );
  const requests: ReceivedRequest[] = [];
  const server = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
    requests.push({
      path: req.url ?? "",
      headers: req.headers,
      body: Buffer.alloc(0),
      at: Date.now(),
      remotePort: req.socket.remotePort ?? 0,
    });
    res.statusCode = 204;
    res.end();
  });
  server.on("tlsClientError", () => {});
  const { port, close } = await listenOnLoopback(server);
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  return {
    port,
    url: (path = "/hook") => `https://127.0.0.1:${port}${path}`,
    requests,
    forPath: (path) => requests.filter((r) => r.path === path),
    close: async () => {
      await close();
      cleanup();
    },
    cleanup,
  };
}
