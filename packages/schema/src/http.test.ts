import { createServer, type Server } from "node:http";
import net from "node:net";
import { jsonClientErrors } from "./http.js";

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
