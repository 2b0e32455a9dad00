import http from "node:http";
import https from "node:https";
import { type AddressInfo, createServer as createTcpServer, type Socket } from "node:net";
import tls from "node:tls";
import { DnsLookupFailed, type Resolver, TargetRefused } from "@botdir/webhook-targets";
import {
  checkTarget,
  classifyError,
  createClient,
  createWebhookSender,
  leanRequest,
  type SenderOptions,
  type WebhookSender,
} from "./http-client.js";

describe("checkTarget (before connecting)", () => {
  it.each([
    "https://127.0.0.1/hook",
    "https://2130706433/hook",
    "https://0x7f000001/hook",
    "https://0177.0.0.1/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://10.1.2.3/hook",
    "https://100.64.0.1/hook",
    "http://93.184.215.14/hook",
    "https://user:pass@93.184.215.14/hook",
    "not a url",
    "ftp://93.184.215.14/hook",
  ])("refuses %s when private targets are not allowed", (url) => {
    expect(checkTarget(url, false).ok).toBe(false);
  });

  it("accepts https to a public address or a host name (names are checked at connect time)", () => {
    expect(checkTarget("https://93.184.215.14/hook", false).ok).toBe(true);
    expect(checkTarget("https://hooks.example.com/vote", false).ok).toBe(true);
  });

  it("allows http and loopback when private targets are allowed", () => {
    expect(checkTarget("http://127.0.0.1:8080/hook", true).ok).toBe(true);
    expect(checkTarget("http://[::1]:8080/hook", true).ok).toBe(true);
  });
});

describe("the request function got calls (leanRequest)", () => {
  it("when got builds an attempt's request, then it sets no option besides the four forwarded and Node's own checkServerIdentity", async () => {
    const server = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => res.end("ok"));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const agents = { http: new http.Agent(), https: new https.Agent() };
    let given: https.RequestOptions | undefined;
    const client = createClient(agents, 5_000, (url, options) => {
      given = options;
      return leanRequest(url, options);
    });
    try {
      const { port } = server.address() as AddressInfo;
      const status = await new Promise<number | undefined>((resolve, reject) => {
        const stream = client.stream(`http://127.0.0.1:${port}/hook`, {
          body: Buffer.from("{}"),
          headers: { "Content-Type": "application/json", "Content-Length": "2" },
        });
        stream.on("error", reject);
        stream.on("response", (res: http.IncomingMessage) => {
          res.resume();
          resolve(res.statusCode);
        });
      });
      expect(status).toBe(200);
      const set = Object.entries(given ?? {})
        .filter(([, value]) => value !== undefined)
        .map(([key]) => key)
        .sort();
      expect(set).toEqual(["agent", "checkServerIdentity", "headers", "method", "setHost"]);
      expect(given?.checkServerIdentity).toBe(tls.checkServerIdentity);
      expect(given?.agent).toBe(agents.http);
    } finally {
      agents.http.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("classifyError", () => {
  it.each([
    [new TargetRefused("refused"), "refused_target"],
    [
      Object.assign(new Error("x"), { name: "RequestError", cause: new TargetRefused("r") }),
      "refused_target",
    ],
    [
      Object.assign(new Error("Timeout awaiting 'request'"), { name: "TimeoutError", code: "ETIMEDOUT" }),
      "timeout",
    ],
    [Object.assign(new Error("getaddrinfo ENOTFOUND x"), { code: "ENOTFOUND" }), "dns"],
    [new DnsLookupFailed("x.example", "ETIMEOUT"), "dns"],
    [
      Object.assign(new Error("x"), {
        name: "RequestError",
        code: "EDNS",
        cause: new DnsLookupFailed("x", "ESERVFAIL"),
      }),
      "dns",
    ],
    [Object.assign(new Error("self-signed"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" }), "tls"],
    [Object.assign(new Error("wrong version"), { code: "ERR_SSL_WRONG_VERSION_NUMBER" }), "tls"],
    [Object.assign(new Error("refused"), { code: "ECONNREFUSED" }), "connection"],
    [Object.assign(new Error("reset"), { code: "ECONNRESET" }), "connection"],
  ])("classifies %s as %s", (error, kind) => {
    expect(classifyError(error)).toBe(kind);
  });
});

describe("connection reuse (keep-alive)", () => {
  interface RawReceiver {
    url: string;
    /** Connections accepted, and POST requests seen, so far. */
    connections: number;
    requests: number;
    /** Sockets of this receiver that have closed (the client hung up or was reset). */
    closed: number;
    /** Everything received, as latin1 text. */
    received: string;
    close(): Promise<void>;
  }

  /**
   * A receiver on raw TCP: `answer(connection, request)` writes the reply to request number
   * `request` (1-based, counted per connection) on connection number `connection`.
   */
  async function rawReceiver(answer: (socket: Socket, connection: number, request: number) => void) {
    const sockets = new Set<Socket>();
    const state: RawReceiver = {
      url: "",
      connections: 0,
      requests: 0,
      closed: 0,
      received: "",
      close: async () => {},
    };
    const server = createTcpServer((socket) => {
      const connection = ++state.connections;
      let requests = 0;
      sockets.add(socket);
      socket.on("error", () => {});
      socket.once("close", () => {
        sockets.delete(socket);
        state.closed++;
      });
      socket.on("data", (chunk: Buffer) => {
        state.received += chunk.toString("latin1");
        const count = chunk.toString("latin1").split("POST /").length - 1;
        for (let i = 0; i < count && !socket.destroyed; i++) {
          state.requests++;
          answer(socket, connection, ++requests);
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    state.close = () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      });
    return state;
  }

  const NO_CONTENT = "HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n";
  const senders: WebhookSender[] = [];
  const receivers: RawReceiver[] = [];
  afterAll(async () => {
    for (const s of senders) s.close();
    await Promise.all(receivers.map((r) => r.close()));
  });

  function sender(options: Partial<SenderOptions> = {}): WebhookSender {
    const s = createWebhookSender({ timeoutMs: 5_000, allowPrivateTargets: true, ...options });
    senders.push(s);
    return s;
  }
  async function receiver(answer: Parameters<typeof rawReceiver>[0]): Promise<RawReceiver> {
    const r = await rawReceiver(answer);
    receivers.push(r);
    return r;
  }
  const request = (url: string) => ({
    url,
    body: Buffer.from('{"event":"vote.create"}'),
    headers: { "Content-Type": "application/json" },
  });

  it("when two deliveries go to the same receiver, then the second reuses the first one's connection", async () => {
    const r = await receiver((socket) => socket.write(NO_CONTENT));
    const send = sender();

    const first = await send(request(r.url));
    const second = await send(request(r.url));

    expect([first.ok, first.statusCode, second.ok, second.statusCode]).toEqual([true, 204, true, 204]);
    expect(r.requests).toBe(2);
    expect(r.connections).toBe(1);
  });

  it("when the reply carries a small body, then it is drained and the connection reused", async () => {
    const body = "x".repeat(1024);
    const r = await receiver((socket) =>
      socket.write(`HTTP/1.1 500 Internal Server Error\r\nContent-Length: ${body.length}\r\n\r\n${body}`),
    );
    const send = sender();

    const first = await send(request(r.url));
    const second = await send(request(r.url));

    expect([first.statusCode, first.errorKind, second.statusCode]).toEqual([500, "http_status", 500]);
    expect(r.connections).toBe(1);
  });

  it("when the reply declares a body over 64 KiB, then the status decides, the body is not read and the connection is dropped", async () => {
    const r = await receiver((socket) => {
      socket.write("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1073741824\r\n\r\n");
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      const pump = () => {
        while (!socket.destroyed && socket.write(chunk)) {}
        if (!socket.destroyed) socket.once("drain", pump);
      };
      pump();
    });
    const send = sender();

    const first = await send(request(r.url));
    expect([first.ok, first.statusCode, first.errorKind]).toEqual([false, 500, "http_status"]);
    await waitUntil(() => r.closed === 1);
    await send(request(r.url));
    expect(r.connections).toBe(2);
  });

  it("when a chunked reply body grows past 64 KiB, then the connection is dropped instead of reused", async () => {
    const r = await receiver((socket) => {
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
      const chunk = "b".repeat(16 * 1024);
      for (let i = 0; i < 8; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
      socket.write("0\r\n\r\n");
    });
    const send = sender();

    const first = await send(request(r.url));
    expect([first.ok, first.statusCode]).toEqual([true, 200]);
    await waitUntil(() => r.closed === 1);
    await send(request(r.url));
    expect(r.connections).toBe(2);
  });

  it("when the receiver drops an idle pooled connection as it is reused, then the request goes once more on a new connection within the same attempt", async () => {
    const r = await receiver((socket, connection, n) => {
      if (connection === 1 && n === 2) socket.resetAndDestroy();
      else socket.write(NO_CONTENT);
    });
    const send = sender();

    await send(request(r.url));
    const outcome = await send(request(r.url));

    expect([outcome.ok, outcome.statusCode]).toEqual([true, 204]);
    expect(r.connections).toBe(2);
    expect(r.requests).toBe(3);
  });

  it("when a new connection is reset, then the attempt fails as connection and is not sent again", async () => {
    const r = await receiver((socket) => socket.resetAndDestroy());
    const outcome = await sender()(request(r.url));

    expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, null, "connection"]);
    expect(r.connections).toBe(1);
    expect(r.requests).toBe(1);
  });
  it("when a delivery is sent, then the wire carries exactly our headers, the right Content-Length and the exact body bytes, and nothing added by the client", async () => {
    const r = await receiver((socket) => socket.write(NO_CONTENT));
    const body = Buffer.from('{"event":"vote.create","bot_id":"1","user_id":"2","voted_at":"é"}', "utf8");
    const headers = {
      "Content-Type": "application/json",
      "User-Agent": "Service-Webhook/1",
      Authorization: "whsec_x",
      "X-Webhook-Event": "vote.create",
      "X-Webhook-Delivery": "d-1",
      "X-Webhook-Signature-256": "sha256=abc",
    };

    const outcome = await sender()({ url: r.url, body, headers });

    expect([outcome.ok, outcome.statusCode]).toEqual([true, 204]);
    const [head = "", sent = ""] = r.received.split("\r\n\r\n");
    const [requestLine, ...lines] = head.split("\r\n");
    expect(requestLine).toBe("POST /hook HTTP/1.1");
    const received = Object.fromEntries(
      lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
    );
    const host = new URL(r.url).host;
    expect(received).toEqual({
      ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])),
      "content-length": String(body.length),
      host,
      connection: "keep-alive",
    });
    expect(Buffer.from(sent, "latin1").equals(body)).toBe(true);
  });

  it("when the receiver answers 302, then the attempt fails as redirect and the Location is never requested", async () => {
    const r = await receiver((socket) =>
      socket.write("HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"),
    );

    const outcome = await sender()(request(r.url));

    expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, 302, "redirect"]);
    expect(r.requests).toBe(1);
    expect(r.received).not.toContain("/elsewhere");
  });

  it("when the receiver never answers, then the attempt fails as timeout and the connection is closed", async () => {
    const r = await receiver(() => {});

    const outcome = await sender({ timeoutMs: 200 })(request(r.url));

    expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, null, "timeout"]);
    await waitUntil(() => r.closed === 1);
  });

  it("when a host name resolves to a private address under production rules, then the attempt is refused_target and nothing connects", async () => {
    const r = await receiver((socket) => socket.write(NO_CONTENT));
    const resolver: Resolver = async () => ["127.0.0.1"];
    const port = new URL(r.url).port;

    const outcome = await sender({ allowPrivateTargets: false, resolver })(
      request(`https://hooks.rebind.example:${port}/hook`),
    );

    expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, null, "refused_target"]);
    expect(r.connections).toBe(0);
  });

  it("when a host name does not resolve, then the attempt fails as dns", async () => {
    const resolver: Resolver = async (host) => {
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    };

    const outcome = await sender({ allowPrivateTargets: false, resolver })(
      request("https://nowhere.example/hook"),
    );

    expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, null, "dns"]);
  });

  it("when the host's nameserver never answers, then the attempt fails as dns at the DNS deadline, long before the attempt's timeout", async () => {
    const never: Resolver = () => new Promise(() => {});
    const send = sender({ allowPrivateTargets: false, resolver: never, timeoutMs: 5_000, dnsTimeoutMs: 200 });

    const outcomes = await Promise.all(
      Array.from({ length: 8 }, (_, i) => send(request(`https://h${i}.blackhole.example/hook`))),
    );

    for (const outcome of outcomes) {
      expect([outcome.ok, outcome.statusCode, outcome.errorKind]).toEqual([false, null, "dns"]);
      expect(outcome.durationMs).toBeGreaterThanOrEqual(190);
      expect(outcome.durationMs).toBeLessThan(2_000);
    }
  });

  it("when private targets are allowed and the URL names localhost, then it is delivered to loopback without DNS", async () => {
    const r = await receiver((socket) => socket.write(NO_CONTENT));
    const never: Resolver = () => new Promise(() => {});
    const port = new URL(r.url).port;

    const outcome = await sender({ resolver: never, dnsTimeoutMs: 100 })(
      request(`http://localhost:${port}/hook`),
    );

    expect([outcome.ok, outcome.statusCode]).toEqual([true, 204]);
    expect(r.requests).toBe(1);
  });
});

async function waitUntil(probe: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !probe(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!probe()) throw new Error("condition not reached");
}
