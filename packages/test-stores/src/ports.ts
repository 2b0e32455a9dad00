import { connect, createServer } from "node:net";

/** A free TCP port on 127.0.0.1 (bound, read, released). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/** Whether something accepts TCP connections on 127.0.0.1:`port` right now. */
export function listening(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Runs as root: PostgreSQL's tools and PgBouncer refuse to, so they run as `postgres`. */
export function runningAsRoot(): boolean {
  return typeof process.getuid === "function" && process.getuid() === 0;
}
