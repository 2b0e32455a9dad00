/**
 * The production edge with real processes: readiness that matches fail-open (Redis down keeps the
 * API and vote-ingest ready, not the dispatcher), refusals that cost nothing (no body read, no
 * Redis key for unknown tokens), and a slow-header client cut off by the explicit headers timeout.
 */
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { randomUserId } from "@botdir/db/testing";
import { Redis } from "ioredis";
import { call, waitFor } from "../../src/processes.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({
  privateRedis: true,
  // Timeouts far above what a request takes on a loaded machine, so only the slow-header client
  // below meets one.
  env: {
    HTTP_KEEP_ALIVE_TIMEOUT_MS: "500",
    HTTP_HEADERS_TIMEOUT_MS: "5000",
    HTTP_REQUEST_TIMEOUT_MS: "30000",
  },
});

const randomToken = () => randomBytes(32).toString("base64url");

/** Everything in the private Redis that is not BullMQ's (the dispatcher's queue keys). */
async function apiKeys(): Promise<string[]> {
  const client = new Redis(stack.redis.url, { maxRetriesPerRequest: 1 });
  try {
    return (await client.keys("*")).filter((k) => !k.startsWith("{botdir}"));
  } finally {
    client.disconnect();
  }
}

describe("refusals cost nothing", () => {
  it("when 1,000 random tokens hit the API 100 at a time, then each gets 401 or, past the flood budget, 503 with Retry-After, and not one Redis key is created", async () => {
    const bot = await stack.webhookBot("http://127.0.0.1:9/hook");
    expect(await apiKeys()).toEqual([]);
    const paths = [
      { method: "GET", path: `/api/v1/bots/${bot.id}/check?userId=${randomUserId()}` },
      { method: "GET", path: `/api/v1/bots/${bot.id}/votes` },
      { method: "POST", path: `/api/v1/bots/${bot.id}/stats`, body: { server_count: 5 } },
      { method: "PUT", path: `/api/v1/bots/${bot.id}/commands`, body: { commands: [] } },
    ];
    const statuses: number[] = [];
    const shedWithoutRetryAfter: number[] = [];
    for (let round = 0; round < 10; round++) {
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) => {
          const p = paths[i % paths.length]!;
          return call(`${stack.api.base}${p.path}`, {
            method: p.method,
            headers: { authorization: randomToken() },
            ...(p.body ? { body: p.body } : {}),
          });
        }),
      );
      statuses.push(...answers.map((a) => a.status));
      for (const a of answers)
        if (a.status === 503 && a.headers.get("retry-after") === null) shedWithoutRetryAfter.push(a.status);
    }
    expect(statuses).toHaveLength(1_000);
    // API_FLOOD_MAX_PENDING (32) unknown tokens wait for the token set at once; the rest are shed.
    expect([...new Set(statuses)].filter((s) => s !== 401 && s !== 503)).toEqual([]);
    expect(statuses.filter((s) => s === 401).length).toBeGreaterThan(0);
    expect(shedWithoutRetryAfter).toEqual([]);
    expect(await apiKeys()).toEqual([]);
    // The real token does open its window (so the limiter still works).
    expect(
      (await call(`${stack.api.base}/api/v1/bots/${bot.id}/votes`, { headers: { authorization: bot.token } }))
        .status,
    ).toBe(200);
    expect((await apiKeys()).filter((k) => k.includes(":rl:votes:"))).toHaveLength(1);
  });

  it("when a 1 MB PUT /commands carries a random token, then 401 arrives before a body byte is sent (0 of 1,000,000 read)", async () => {
    const bot = await stack.webhookBot("http://127.0.0.1:9/hook");
    // Only the headers are sent: a server that waited for the body would not answer before
    // HTTP_REQUEST_TIMEOUT_MS (30 s), and rawUpload gives up after 15 s.
    const result = await rawUpload(commandsHead(bot.id, randomToken(), 1_000_000), null);
    expect(result.answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(result.answer).toContain('{"error":"Invalid token."}');
    expect(result.answer).toMatch(/\r\nconnection: close\r\n/i);
    expect(result.bodyBytesSent).toBe(0);
  });

  it("when a 1 MB body is streamed with a random token, then the 401 comes back and the server reads less than a quarter of the body", async () => {
    const bot = await stack.webhookBot("http://127.0.0.1:9/hook");
    const body = Buffer.from(JSON.stringify({ commands: [{ name: "x", description: "y".repeat(999_960) }] }));

    // Sentinel: the same upload with the bot's own token is read in full, and the counter sees it.
    const before = stack.api.readBytes();
    const accepted = await rawUpload(commandsHead(bot.id, bot.token, body.length), body);
    expect(accepted.answer).toMatch(/^HTTP\/1\.1 [24]\d\d /);
    expect(accepted.bodyBytesSent).toBe(body.length);
    expect(stack.api.readBytes() - before).toBeGreaterThanOrEqual(body.length);

    const readBefore = stack.api.readBytes();
    const refused = await rawUpload(commandsHead(bot.id, randomToken(), body.length), body);
    const read = stack.api.readBytes() - readBefore;
    // The 401 with Connection: close (its bytes are checked by the test above); the client may see
    // the reset of the closed connection before it has read the answer, never anything else.
    expect(refused.reset === null ? refused.answer : `reset: ${refused.reset}`).toMatch(
      /^(HTTP\/1\.1 401 [\s\S]*\r\nconnection: close\r\n[\s\S]*\{"error":"Invalid token\."\}|reset: (EPIPE|ECONNRESET))$/i,
    );
    // Node reads what already sits in the socket (64 KiB at a time) until the connection closes.
    expect(read).toBeLessThan(body.length / 4);
  });
});

/** The head of a PUT /commands announcing `length` body bytes. */
function commandsHead(botId: string, token: string | null, length: number): string {
  return (
    `PUT /api/v1/bots/${botId}/commands HTTP/1.1\r\nHost: api\r\nAuthorization: ${token}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`
  );
}

/**
 * Sends `head`, then streams `body` (if any) in 16 KiB chunks, one per event-loop turn (so an
 * answer is read before the next chunk goes), until all is sent or the server answers; resolves
 * once the connection is closed. `bodyBytesSent` counts the body bytes handed to the socket by the
 * time the answer arrived. `reset` is the error code when the server reset the connection while
 * the body was being uploaded (how a server that stops reading ends an upload); any other error,
 * or a reset before a body byte was sent, rejects.
 */
function rawUpload(
  head: string,
  body: Buffer | null,
): Promise<{ answer: string; bodyBytesSent: number; reset: string | null }> {
  return new Promise((resolve, reject) => {
    const socket = connect(stack.api.port, "127.0.0.1");
    const headBytes = Buffer.byteLength(head);
    let answer = "";
    let bodyBytesSent: number | null = null;
    let reset: string | null = null;
    let offset = 0;
    const sent = () => Math.max(0, socket.bytesWritten - headBytes);
    const pump = () => {
      if (!body || bodyBytesSent !== null || offset >= body.length || socket.destroyed) return;
      const chunk = body.subarray(offset, offset + 16_384);
      offset += chunk.length;
      if (socket.write(chunk)) setImmediate(pump);
      else socket.once("drain", () => setImmediate(pump));
    };
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within 15 s: ${JSON.stringify(answer)}`));
    }, 15_000);
    socket.on("data", (chunk) => {
      if (bodyBytesSent === null) bodyBytesSent = sent();
      answer += chunk.toString();
    });
    socket.on("error", (error: NodeJS.ErrnoException) => {
      if (answer !== "") return; // the server closed after answering
      if ((error.code === "EPIPE" || error.code === "ECONNRESET") && offset > 0) reset = error.code;
      else {
        clearTimeout(timer);
        reject(error);
      }
    });
    socket.on("close", () => {
      clearTimeout(timer);
      if (answer === "" && reset === null)
        return reject(new Error("the connection closed without an answer"));
      resolve({ answer, bodyBytesSent: bodyBytesSent ?? sent(), reset });
    });
    socket.write(head);
    pump();
  });
}

describe("server timeouts", () => {
  it("when a client sends its headers slower than HTTP_HEADERS_TIMEOUT_MS, then the API closes the connection with a JSON 408", async () => {
    const started = Date.now();
    const { answer, ms } = await new Promise<{ answer: string; ms: number }>((resolve, reject) => {
      const socket = connect(stack.api.port, "127.0.0.1");
      let data = "";
      socket.write("GET /api/v1/bots/1/check HTTP/1.1\r\nHost: api\r\n");
      const drip = setInterval(() => socket.writable && socket.write("X-Slow: 1\r\n"), 200);
      socket.on("data", (chunk) => {
        data += chunk.toString();
      });
      socket.on("error", () => {});
      socket.on("close", () => {
        clearInterval(drip);
        resolve({ answer: data, ms: Date.now() - started });
      });
      setTimeout(() => reject(new Error("the slow client is still connected after 30 s")), 30_000).unref();
    });
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('{"error":"The request took too long to arrive."}');
    expect(ms).toBeGreaterThanOrEqual(4_900);
    expect(ms).toBeLessThan(15_000); // the 5 s headers timeout, not the 30 s request timeout
  });
});

describe("readiness while Redis is down", () => {
  it("when Redis is killed, then the API's and vote-ingest's /readyz stay 200 and they serve, /api/health says 503, and the dispatcher is not ready", async () => {
    const bot = await stack.webhookBot("http://127.0.0.1:9/hook");
    const auth = { authorization: bot.token };
    for (const app of [stack.api, stack.ingest, stack.dispatcher]) {
      expect((await call(`${app.base}/readyz`)).status).toBe(200);
      expect((await call(`${app.base}/livez`)).status).toBe(200);
    }

    await stack.redis.kill();
    try {
      const [apiReady, ingestReady] = await Promise.all([
        call(`${stack.api.base}/readyz`),
        call(`${stack.ingest.base}/readyz`),
      ]);
      expect(apiReady.status).toBe(200);
      expect(apiReady.body).toEqual({ status: "ok", checks: { postgres: "ok" } });
      expect(ingestReady.status).toBe(200);

      const health = await call(`${stack.api.base}/api/health`);
      expect(health.status).toBe(503);
      expect(health.body).toEqual({
        status: "unavailable",
        checks: { postgres: "ok", redis: "down" },
        error: "Redis is unreachable.",
      });
      expect((await call(`${stack.ingest.base}/health`)).status).toBe(503);

      // Requests are served meanwhile: the limiter fails open, votes are recorded (the relay
      // hands them off later).
      const check = await call(`${stack.api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, {
        headers: auth,
      });
      expect(check.status).toBe(200);
      const stats = await call(`${stack.api.base}/api/v1/bots/${bot.id}/stats`, {
        method: "POST",
        headers: auth,
        body: { server_count: 9 },
      });
      expect(stats.status).toBe(200);
      expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);

      // The dispatcher needs Redis for its jobs: it is alive but not ready, and says why.
      const dispatcherReady = await waitFor(
        async () => {
          const r = await call(`${stack.dispatcher.base}/readyz`);
          return r.status === 503 ? r : null;
        },
        "the dispatcher's /readyz to turn 503",
        5_000,
      );
      expect(dispatcherReady.body).toEqual({
        status: "unavailable",
        checks: { postgres: "ok", redis: "down" },
        error: "Redis is unreachable.",
      });
      expect((await call(`${stack.dispatcher.base}/livez`)).status).toBe(200);
    } finally {
      await stack.redis.restart();
    }
    await waitFor(
      async () => (await call(`${stack.dispatcher.base}/readyz`)).status === 200,
      "the dispatcher ready again",
    );
  });
});
