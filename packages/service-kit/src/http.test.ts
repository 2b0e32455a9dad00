import { createServer, type Server } from "node:http";
import net from "node:net";
import type { Request, Response } from "express";
import { jsonClientErrors, type Logger, requestContext } from "./http.js";

let server: Server;
let port: number;

beforeAll(async () => {
  server = createServer((_req, res) => res.end("ok"));
  jsonClientErrors(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as net.AddressInfo).port;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function raw(payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(payload));
    let data = "";
    socket.on("data", (chunk) => {
      data += chunk;
    });
    socket.on("end", () => resolve(data));
    socket.on("error", reject);
  });
}

describe("jsonClientErrors", () => {
  it("answers a request that is not HTTP with the JSON error body and closes", async () => {
    const answer = await raw("THIS IS NOT HTTP\r\n\r\n");
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(answer).toContain("Content-Type: application/json; charset=utf-8");
    expect(answer.split("\r\n\r\n")[1]).toBe('{"error":"The request is not valid HTTP."}');
  });

  it("answers oversized headers with a JSON 431", async () => {
    const answer = await raw(`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 431 /);
    expect(answer.split("\r\n\r\n")[1]).toBe('{"error":"The request headers are too large."}');
  });
});

describe("requestContext: one log line per finished response", () => {
  /** A bare node:http server running the middleware, answering 200 or 404 by path. */
  async function serve(logger: Logger) {
    const middleware = requestContext(logger);
    const app = createServer((req, res) => {
      Object.assign(res, { locals: {} });
      Object.assign(req, { originalUrl: req.url });
      middleware(req as Request, res as unknown as Response, () => {
        res.statusCode = req.url?.startsWith("/missing") ? 404 : 200;
        res.end("ok");
      });
    });
    await new Promise<void>((resolve) => app.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${(app.address() as net.AddressInfo).port}`;
    return { base, close: () => new Promise<void>((resolve) => app.close(() => resolve())) };
  }
  const capture = () => {
    const lines: Record<string, unknown>[] = [];
    const logger: Logger = {
      info: (obj) => lines.push(obj as Record<string, unknown>),
      warn() {},
      error() {},
    };
    return { lines, logger };
  };

  it("reports each response to the middleware that saw its request, never to another server's", async () => {
    const a = capture();
    const b = capture();
    const [one, two] = [await serve(a.logger), await serve(b.logger)];
    try {
      const res = await fetch(`${one.base}/missing?token=secret`, { headers: { "x-request-id": "req-1" } });
      expect(res.headers.get("x-request-id")).toBe("req-1");
      await fetch(`${two.base}/`);
      await fetch(`${two.base}/`);
      // The response has finished before the client has read it: the line is written by now.
      expect(a.lines).toEqual([
        {
          reqId: "req-1",
          method: "GET",
          route: "unmatched",
          path: "/missing",
          status: 404,
          ms: expect.any(Number),
        },
      ]);
      expect(b.lines).toHaveLength(2);
      expect(b.lines.every((line) => line.status === 200 && line.path === "/")).toBe(true);
      // Plain servers in the same process (no middleware) are ignored.
      expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
      expect(a.lines.length + b.lines.length).toBe(3);
    } finally {
      await one.close();
      await two.close();
    }
  });

  it("when writing the line fails, then the answer is unharmed and the next request is served", async () => {
    const broken: Logger = {
      info() {
        throw new Error("log destination gone");
      },
      warn() {},
      error() {},
    };
    const app = await serve(broken);
    try {
      expect((await fetch(`${app.base}/`)).status).toBe(200);
      expect((await fetch(`${app.base}/`)).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});
