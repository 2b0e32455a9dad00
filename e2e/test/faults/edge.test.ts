/**
 * The production edge with real processes: readiness that matches fail-open (Redis down keeps the
 * API and vote-ingest ready, not the dispatcher), refusals that cost nothing (no body read, no
 * Redis key for unknown tokens), and a slow-header client cut off by the explicit headers timeout.
 */
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import {
  createTestDatabase,
  type PrivateRedis,
  randomUserId,
  startRedisServer,
  type TestDatabase,
} from "@botdir/db/testing";
import { Redis } from "ioredis";
import { type AppProcess, call, freshKeys, startApp, stopAll, waitFor } from "../../src/processes.js";
import { appEnv, castVote, seedWebhookBot } from "../../src/stack.js";

const keys = freshKeys();
let t: TestDatabase;
let redis: PrivateRedis;
let api: AppProcess;
let ingest: AppProcess;
let dispatcher: AppProcess;

beforeAll(async () => {
  [t, redis] = await Promise.all([createTestDatabase(), startRedisServer()]);
  const env = appEnv(
    { databaseUrl: t.url, redisUrl: redis.url, keys },
    { HTTP_KEEP_ALIVE_TIMEOUT_MS: "500", HTTP_HEADERS_TIMEOUT_MS: "1000", HTTP_REQUEST_TIMEOUT_MS: "3000" },
  );
  [api, ingest, dispatcher] = await Promise.all([
    startApp("api", env),
    startApp("vote-ingest", env),
    startApp("webhook-dispatcher", env),
  ]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await redis?.kill();
  await t?.drop();
});

const randomToken = () => randomBytes(32).toString("base64url");

/** Everything in the private Redis that is not BullMQ's (the dispatcher's queue keys). */
async function apiKeys(): Promise<string[]> {
  const client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  try {
    return (await client.keys("*")).filter((k) => !k.startsWith("{botdir}"));
  } finally {
    client.disconnect();
  }
}

describe("refusals cost nothing", () => {
  it("when 1,000 random tokens hit the API, then all get 401 and not one Redis key is created", async () => {
    const bot = await seedWebhookBot(t.db, keys, "http://127.0.0.1:9/hook");
    expect(await apiKeys()).toEqual([]);
    const paths = [
      { method: "GET", path: `/api/v1/bots/${bot.id}/check?userId=${randomUserId()}` },
      { method: "GET", path: `/api/v1/bots/${bot.id}/votes` },
      { method: "POST", path: `/api/v1/bots/${bot.id}/stats`, body: { server_count: 5 } },
      { method: "PUT", path: `/api/v1/bots/${bot.id}/commands`, body: { commands: [] } },
    ];
    const statuses: number[] = [];
    for (let round = 0; round < 10; round++) {
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) => {
          const p = paths[i % paths.length]!;
          return call(`${api.base}${p.path}`, {
            method: p.method,
            headers: { authorization: randomToken() },
            ...(p.body ? { body: p.body } : {}),
          });
        }),
      );
      statuses.push(...answers.map((a) => a.status));
    }
    expect(statuses).toHaveLength(1_000);
    expect(new Set(statuses)).toEqual(new Set([401]));
    expect(await apiKeys()).toEqual([]);
    // The real token does open its window (so the limiter still works).
    expect(
      (await call(`${api.base}/api/v1/bots/${bot.id}/votes`, { headers: { authorization: bot.token } }))
        .status,
    ).toBe(200);
    expect((await apiKeys()).filter((k) => k.includes(":rl:votes:"))).toHaveLength(1);
  });

  it("when a 1 MB PUT /commands carries a random token, then 401 arrives before a body byte is sent (0 of 1,000,000 read)", async () => {
    const bot = await seedWebhookBot(t.db, keys, "http://127.0.0.1:9/hook");
    // Only the headers are sent: a server that waited for the body would answer 408 after
    // HTTP_REQUEST_TIMEOUT_MS (3 s), not 401.
    const result = await rawUpload(commandsHead(bot.id, randomToken(), 1_000_000), null);
    expect(result.answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(result.answer).toContain('{"error":"Invalid token."}');
    expect(result.answer).toMatch(/\r\nconnection: close\r\n/i);
    expect(result.bodyBytesSent).toBe(0);
  });

  it("when a 1 MB body is streamed with a random token, then the 401 comes back and the server reads less than a quarter of the body", async () => {
    const bot = await seedWebhookBot(t.db, keys, "http://127.0.0.1:9/hook");
    const body = Buffer.from(JSON.stringify({ commands: [{ name: "x", description: "y".repeat(999_960) }] }));

    // Sentinel: the same upload with the bot's own token is read in full, and the counter sees it.
    const before = api.readBytes();
    const accepted = await rawUpload(commandsHead(bot.id, bot.token, body.length), body);
    expect(accepted.answer).toMatch(/^HTTP\/1\.1 [24]\d\d /);
    expect(accepted.bodyBytesSent).toBe(body.length);
    expect(api.readBytes() - before).toBeGreaterThanOrEqual(body.length);

    const readBefore = api.readBytes();
    const refused = await rawUpload(commandsHead(bot.id, randomToken(), body.length), body);
    const read = api.readBytes() - readBefore;
    expect(refused.answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(refused.answer).toContain('{"error":"Invalid token."}');
    expect(refused.answer).toMatch(/\r\nconnection: close\r\n/i);
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
 * Sends `head`, then streams `body` (if any) in 16 KiB chunks as fast as the socket takes them,
 * until all is sent or the server answers; resolves once the server has closed the connection.
 * `bodyBytesSent` counts the body bytes handed to the socket by the time the answer arrived. An
 * error before any answer rejects; a reset while still uploading after the answer is how a server
 * that stops reading ends the upload, and is expected.
 */
function rawUpload(head: string, body: Buffer | null): Promise<{ answer: string; bodyBytesSent: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(api.port, "127.0.0.1");
    const headBytes = Buffer.byteLength(head);
    let answer = "";
    let bodyBytesSent: number | null = null;
    let offset = 0;
    const sent = () => Math.max(0, socket.bytesWritten - headBytes);
    const pump = () => {
      while (body && bodyBytesSent === null && offset < body.length) {
        const chunk = body.subarray(offset, offset + 16_384);
        offset += chunk.length;
        if (!socket.write(chunk)) return socket.once("drain", pump);
      }
    };
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within 15 s: ${JSON.stringify(answer)}`));
    }, 15_000);
    socket.on("data", (chunk) => {
      if (bodyBytesSent === null) bodyBytesSent = sent();
      answer += chunk.toString();
    });
    socket.on("error", (error) => {
      if (answer === "") {
        clearTimeout(timer);
        reject(error);
      }
    });
    socket.on("close", () => {
      clearTimeout(timer);
      if (answer === "") return reject(new Error("the connection closed without an answer"));
      resolve({ answer, bodyBytesSent: bodyBytesSent ?? sent() });
    });
    socket.write(head);
    pump();
  });
}

describe("server timeouts", () => {
  it("when a client sends its headers slower than HTTP_HEADERS_TIMEOUT_MS, then the API closes the connection with a JSON 408", async () => {
    const started = Date.now();
    const { answer, ms } = await new Promise<{ answer: string; ms: number }>((resolve, reject) => {
      const socket = connect(api.port, "127.0.0.1");
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
      setTimeout(() => reject(new Error("the slow client is still connected after 8 s")), 8_000).unref();
    });
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('{"error":"The request took too long to arrive."}');
    expect(ms).toBeGreaterThanOrEqual(900);
    expect(ms).toBeLessThan(3_000);
  });
});

describe("readiness while Redis is down", () => {
  it("when Redis is killed, then the API's and vote-ingest's /readyz stay 200 and they serve, /api/health says 503, and the dispatcher is not ready", async () => {
    const bot = await seedWebhookBot(t.db, keys, "http://127.0.0.1:9/hook");
    const auth = { authorization: bot.token };
    for (const app of [api, ingest, dispatcher]) {
      expect((await call(`${app.base}/readyz`)).status).toBe(200);
      expect((await call(`${app.base}/livez`)).status).toBe(200);
    }

    await redis.kill();
    try {
      const [apiReady, ingestReady] = await Promise.all([
        call(`${api.base}/readyz`),
        call(`${ingest.base}/readyz`),
      ]);
      expect(apiReady.status).toBe(200);
      expect(apiReady.body).toEqual({ status: "ok", checks: { postgres: "ok" } });
      expect(ingestReady.status).toBe(200);

      const health = await call(`${api.base}/api/health`);
      expect(health.status).toBe(503);
      expect(health.body).toEqual({
        status: "unavailable",
        checks: { postgres: "ok", redis: "down" },
        error: "Redis is unreachable.",
      });
      expect((await call(`${ingest.base}/health`)).status).toBe(503);

      // Requests are served meanwhile: the limiter fails open, votes are recorded (the relay
      // hands them off later).
      const check = await call(`${api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, {
        headers: auth,
      });
      expect(check.status).toBe(200);
      const stats = await call(`${api.base}/api/v1/bots/${bot.id}/stats`, {
        method: "POST",
        headers: auth,
        body: { server_count: 9 },
      });
      expect(stats.status).toBe(200);
      expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);

      // The dispatcher needs Redis for its jobs: it is alive but not ready, and says why.
      const dispatcherReady = await waitFor(
        async () => {
          const r = await call(`${dispatcher.base}/readyz`);
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
      expect((await call(`${dispatcher.base}/livez`)).status).toBe(200);
    } finally {
      await redis.restart();
    }
    await waitFor(
      async () => (await call(`${dispatcher.base}/readyz`)).status === 200,
      "the dispatcher ready again",
    );
  });
});
