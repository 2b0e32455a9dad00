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
    const result = await new Promise<{ answer: string; ms: number; bodyBytesSent: number }>(
      (resolve, reject) => {
        const started = Date.now();
        const socket = connect(api.port, "127.0.0.1");
        let answer = "";
        const bodyBytesSent = 0; // the client never sends the announced body
        socket.on("data", (chunk) => {
          answer += chunk.toString();
          if (answer.includes("}")) resolve({ answer, ms: Date.now() - started, bodyBytesSent });
        });
        socket.on("error", reject);
        setTimeout(
          () => reject(new Error(`no answer without the body: ${JSON.stringify(answer)}`)),
          3_000,
        ).unref();
        socket.write(
          `PUT /api/v1/bots/${bot.id}/commands HTTP/1.1\r\nHost: api\r\nAuthorization: ${randomToken()}\r\n` +
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n",
        );
      },
    );
    expect(result.answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(result.answer).toContain('{"error":"Invalid token."}');
    expect(result.answer).toMatch(/\r\nconnection: close\r\n/i);
    expect(result.bodyBytesSent).toBe(0);
    expect(result.ms).toBeLessThan(1_000);
  });

  it("when a 1 MB body is sent in full with a random token, then the 401 comes back without the server waiting for it", async () => {
    const bot = await seedWebhookBot(t.db, keys, "http://127.0.0.1:9/hook");
    const body = JSON.stringify({ commands: [{ name: "x", description: "y".repeat(999_960) }] });
    const started = Date.now();
    const r = await call(`${api.base}/api/v1/bots/${bot.id}/commands`, {
      method: "PUT",
      headers: { authorization: randomToken(), "content-type": "application/json" },
      body: JSON.parse(body),
    }).catch((error: Error) => ({ status: 0, text: error.message, ms: Date.now() - started }));
    // Either the 401 (usual), or the client saw the socket close while still uploading; never 413/400.
    if (r.status !== 0) {
      expect(r.status).toBe(401);
      expect(r.text).toBe('{"error":"Invalid token."}');
    }
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});

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
