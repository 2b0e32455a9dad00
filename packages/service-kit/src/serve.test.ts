import http from "node:http";
import net from "node:net";
import { z } from "zod";
import { checkHttpTimeouts, EnvFields, httpTimeoutsOf, parseEnv } from "./env.js";
import { closeServer, stopAccepting } from "./http.js";
import { createMetricsRegistry } from "./metrics.js";
import { createHttpServer, DEFAULT_HTTP_TIMEOUTS, ListenError, type Service, serve } from "./serve.js";
import { silentLogger } from "./testing.js";

let service: Service;
let base: string;
let postgresUp = true;
let checks = 0;
const registry = createMetricsRegistry("test");

beforeAll(async () => {
  service = await serve({
    logger: silentLogger,
    app: (_req, res) => {
      res.setHeader("Content-Type", "text/plain");
      res.end("app");
    },
    port: 0,
    portVariable: "TEST_PORT",
    host: "127.0.0.1",
    timeouts: { keepAliveMs: 200, headersMs: 400, requestMs: 1_000 },
    readiness: {
      postgres: async () => {
        checks++;
        if (!postgresUp) throw new Error("down");
      },
    },
    readinessCacheMs: 0,
    metrics: registry,
  });
  base = `http://127.0.0.1:${(service.server.address() as net.AddressInfo).port}`;
});

afterAll(async () => {
  await service.close();
});

describe("serve(): probes in front of the app", () => {
  it("when the process runs, then /livez is 200 without running any dependency check", async () => {
    const before = checks;
    const res = await fetch(`${base}/livez`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(checks).toBe(before);
  });

  it("when the readiness checks pass, then /readyz is 200 with them; when one fails, 503 naming it", async () => {
    const ok = await fetch(`${base}/readyz`);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ status: "ok", checks: { postgres: "ok" } });
    postgresUp = false;
    try {
      const down = await fetch(`${base}/readyz?verbose=1`);
      expect(down.status).toBe(503);
      expect(await down.json()).toEqual({
        status: "unavailable",
        checks: { postgres: "down" },
        error: "PostgreSQL is unreachable.",
      });
    } finally {
      postgresUp = true;
    }
  });

  it("when a probe gets another method, then a JSON 405 with Allow; other paths reach the app", async () => {
    const post = await fetch(`${base}/readyz`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await post.json()).toEqual({ error: "Method not allowed." });
    expect(await (await fetch(`${base}/readyzz`)).text()).toBe("app");
    expect(await (await fetch(`${base}/api/health`)).text()).toBe("app");
  });

  it("when readiness changes, then botdir_ready follows it at scrape time: 1 while /readyz is 200, 0 while a check fails", async () => {
    const ready = async () => (await registry.getSingleMetric("botdir_ready")?.get())?.values;
    expect(await ready()).toEqual([{ labels: {}, value: 1 }]);
    postgresUp = false;
    try {
      expect(await ready()).toEqual([{ labels: {}, value: 0 }]);
      expect((await fetch(`${base}/readyz`)).status).toBe(503);
    } finally {
      postgresUp = true;
    }
    expect(await ready()).toEqual([{ labels: {}, value: 1 }]);
    expect(await registry.metrics()).toContain('botdir_ready{app="test"} 1');
  });

  it("sets the listener's timeouts explicitly", () => {
    expect(service.server.keepAliveTimeout).toBe(200);
    expect(service.server.headersTimeout).toBe(400);
    expect(service.server.requestTimeout).toBe(1_000);
    expect(service.state()).toBe("ready");
  });

  it("when a client sends its headers slower than the headers timeout, then it gets a JSON 408 and the connection is closed", async () => {
    const started = Date.now();
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect((service.server.address() as net.AddressInfo).port, "127.0.0.1");
      let data = "";
      const drip = setInterval(() => socket.writable && socket.write("X-Slow: 1\r\n"), 50);
      socket.write("GET /livez HTTP/1.1\r\nHost: x\r\n");
      socket.on("data", (chunk) => {
        data += chunk;
      });
      socket.on("close", () => {
        clearInterval(drip);
        resolve(data);
      });
      socket.on("error", () => {});
      setTimeout(() => reject(new Error("still open after 5 s")), 5_000).unref();
    });
    const elapsed = Date.now() - started;
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('{"error":"The request took too long to arrive."}');
    expect(elapsed).toBeGreaterThanOrEqual(350);
    expect(elapsed).toBeLessThan(2_000);
  });
});

describe("HTTP timeout settings", () => {
  const Env = z
    .object({
      HTTP_KEEP_ALIVE_TIMEOUT_MS: EnvFields.HTTP_KEEP_ALIVE_TIMEOUT_MS,
      HTTP_HEADERS_TIMEOUT_MS: EnvFields.HTTP_HEADERS_TIMEOUT_MS,
      HTTP_REQUEST_TIMEOUT_MS: EnvFields.HTTP_REQUEST_TIMEOUT_MS,
    })
    .superRefine(checkHttpTimeouts);

  it("defaults to keep-alive 65 s, headers 66 s, request 90 s", () => {
    expect(httpTimeoutsOf(parseEnv(Env, {}))).toEqual(DEFAULT_HTTP_TIMEOUTS);
    expect(DEFAULT_HTTP_TIMEOUTS).toEqual({ keepAliveMs: 65_000, headersMs: 66_000, requestMs: 90_000 });
  });

  it("when the headers timeout is not longer than keep-alive, then one line names the rule", () => {
    expect(() => parseEnv(Env, { HTTP_KEEP_ALIVE_TIMEOUT_MS: "70000" })).toThrow(
      "Invalid environment: HTTP_HEADERS_TIMEOUT_MS must be longer than HTTP_KEEP_ALIVE_TIMEOUT_MS.",
    );
    expect(() => parseEnv(Env, { HTTP_HEADERS_TIMEOUT_MS: "100000" })).toThrow(
      "Invalid environment: HTTP_REQUEST_TIMEOUT_MS must be at least HTTP_HEADERS_TIMEOUT_MS.",
    );
  });
});

describe("closeServer: no reset for a request already on its way", () => {
  async function started() {
    const server = createHttpServer((_req, res) => res.end("answered"), DEFAULT_HTTP_TIMEOUTS);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return { server, port: (server.address() as net.AddressInfo).port };
  }

  /** A raw connection the server has accepted (counted by it), with everything it receives. */
  async function openConnection(server: http.Server, port: number) {
    const socket = net.connect(port, "127.0.0.1");
    let received = "";
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString();
    });
    const closed = new Promise<{ error?: string }>((resolve) => {
      socket.once("error", (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
      socket.once("close", () => resolve({}));
    });
    await new Promise((resolve) => socket.once("connect", resolve));
    const deadline = Date.now() + 10_000;
    for (;;) {
      const count = await new Promise<number>((resolve, reject) =>
        server.getConnections((error, n) => (error ? reject(error) : resolve(n))),
      );
      if (count > 0) break;
      if (Date.now() > deadline) throw new Error("the server never counted the connection");
      await new Promise((resolve) => setImmediate(resolve));
    }
    return { socket, closed, received: () => received };
  }

  /** Sends one request on the connection and waits for its answer (`count` answers in all). */
  async function exchange(conn: Awaited<ReturnType<typeof openConnection>>, count: number) {
    conn.socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    const deadline = Date.now() + 10_000;
    while ((conn.received().match(/answered/g) ?? []).length < count) {
      if (Date.now() > deadline) throw new Error(`no answer ${count}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it.each([
    ["a connection that has not sent a request yet", 0],
    ["a keep-alive connection between two requests", 1],
  ])(
    "when a client sends its request on %s just after the server started closing, then it is answered with Connection: close, and the close completes",
    async (_what, before) => {
      const { server, port } = await started();
      const conn = await openConnection(server, port);
      for (let i = 1; i <= before; i++) await exchange(conn, i);

      const closing = closeServer(server);
      conn.socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      const end = await conn.closed;

      expect(end.error).toBeUndefined();
      const last = conn.received().split("HTTP/1.1 ").at(-1) ?? "";
      expect(conn.received().match(/HTTP\/1\.1 200 OK\r\n/g)).toHaveLength(before + 1);
      expect(last).toMatch(/\r\nConnection: close\r\n/i);
      expect(last).toMatch(/answered$/);
      await closing;
      expect(server.listening).toBe(false);
    },
  );

  it("when the server stops accepting, then new connections are refused, a request on an open keep-alive connection is answered with Connection: close and that connection closed after the answer, and an idle one stays open", async () => {
    const { server, port } = await started();
    const used = await openConnection(server, port);
    await exchange(used, 1);
    const idle = await openConnection(server, port);
    await exchange(idle, 1);

    await stopAccepting(server);

    expect(server.listening).toBe(false);
    const refused = await new Promise<string>((resolve) => {
      const socket = net.connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve("connected");
      });
      socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    });
    expect(refused).toBe("ECONNREFUSED");

    await exchange(used, 2);
    // The server ends the connection right after the answer: a clean end, no reset.
    expect(await used.closed).toEqual({});
    const last = used.received().split("HTTP/1.1 ").at(-1) ?? "";
    expect(last).toMatch(/^200 OK\r\n/);
    expect(last).toMatch(/\r\nConnection: close\r\n/i);
    expect(last).toMatch(/answered$/);

    // The idle connection is still open, and still answered.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(idle.socket.destroyed).toBe(false);
    await exchange(idle, 2);
    expect(await idle.closed).toEqual({});
    expect(idle.received().split("HTTP/1.1 ").at(-1)).toMatch(/\r\nConnection: close\r\n/i);
    await closeServer(server);
  });

  it("when closeServer follows stopAccepting, then a connection idle since before the stop is closed after the grace, and the close completes", async () => {
    const { server, port } = await started();
    const idle = await openConnection(server, port);
    await exchange(idle, 1);
    await stopAccepting(server);

    const startedAt = Date.now();
    await closeServer(server, 300);

    expect(await idle.closed).toEqual({});
    // Idle for the grace (it had been idle since its answer, shortly before the stop).
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    expect(idle.received().match(/HTTP\/1\.1 200/g)).toHaveLength(1);
  });

  it("when a keep-alive connection stays quiet for the grace after the server started closing, then it is closed and the close completes", async () => {
    const { server, port } = await started();
    const conn = await openConnection(server, port);
    await exchange(conn, 1);

    await closeServer(server, 200);

    expect(await conn.closed).toEqual({});
    // One answer: the keep-alive response, without Connection: close (it came before the close).
    expect(conn.received().match(/HTTP\/1\.1 200/g)).toHaveLength(1);
  });

  it("when the server was not made by createHttpServer (no connection tracking), then its idle keep-alive connection is dropped and the close completes", async () => {
    const server = http.createServer((_req, res) => res.end("answered"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const conn = await openConnection(server, (server.address() as net.AddressInfo).port);
    await exchange(conn, 1);

    await closeServer(server);

    expect(await conn.closed).toEqual({});
    expect(server.listening).toBe(false);
  });
});

describe("serve(): a port that cannot be bound", () => {
  const taken = async () => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    return { holder, port: (holder.address() as net.AddressInfo).port };
  };
  const options = (port: number, extraPort: number) => ({
    logger: silentLogger,
    app: (_req: http.IncomingMessage, res: http.ServerResponse) => res.end("app"),
    port,
    portVariable: "MAIN_PORT",
    host: "127.0.0.1",
    timeouts: DEFAULT_HTTP_TIMEOUTS,
    readiness: {},
    extra: [
      {
        name: "metrics",
        app: (_req: http.IncomingMessage, res: http.ServerResponse) => res.end(),
        port: extraPort,
        portVariable: "METRICS_PORT",
        host: "127.0.0.1",
      },
    ],
  });

  it("when the main port is in use, then one line naming its variable and the port", async () => {
    const { holder, port } = await taken();
    try {
      const started = serve(options(port, 0));
      await expect(started).rejects.toThrow(ListenError);
      await expect(started).rejects.toThrow(`MAIN_PORT ${port} on 127.0.0.1 is already in use.`);
    } finally {
      holder.close();
    }
  });

  it("when an extra listener's port is in use, then it is named and the main listener is released", async () => {
    const { holder, port } = await taken();
    const main = await taken();
    const mainPort = main.port;
    await new Promise((resolve) => main.holder.close(resolve));
    try {
      await expect(serve(options(mainPort, port))).rejects.toThrow(
        `METRICS_PORT ${port} on 127.0.0.1 is already in use.`,
      );
      // The main listener bound before the failure no longer holds its port.
      const again = net.createServer();
      await new Promise<void>((resolve, reject) => {
        again.once("error", reject);
        again.listen(mainPort, "127.0.0.1", resolve);
      });
      again.close();
    } finally {
      holder.close();
    }
  });
});
