/**
 * Fault: a private PostgreSQL server (its own data directory and port) is stopped under the three
 * real apps and started again. Requests never hang, errors are the spec's JSON body, health names
 * PostgreSQL, and the apps recover by themselves.
 */
import { createDb, type Db, migrate } from "@botdir/db";
import { randomUserId } from "@botdir/db/testing";
import {
  type PrivatePostgres,
  type PrivateRedis,
  startPrivatePostgres,
  startRedisServer,
} from "@botdir/test-stores";
import { type AppProcess, call, freshKeys, startApp, stopAll, waitFor } from "../../src/processes.js";
import { type Receiver, startReceiver } from "../../src/receivers.js";
import { appEnv, castVote, deliveriesOf, seedWebhookBot } from "../../src/stack.js";

/** The bound on an answer while PostgreSQL is down (see the writes below). */
const FAST_MS = 5_000;
const keys = freshKeys();
let pg: PrivatePostgres;
let db: Db;
let redis: PrivateRedis;
let receiver: Receiver;
let api: AppProcess;
let ingest: AppProcess;
let dispatcher: AppProcess;

beforeAll(async () => {
  [pg, redis, receiver] = await Promise.all([startPrivatePostgres(), startRedisServer(), startReceiver()]);
  await migrate(pg.url("botdir"));
  db = createDb({ url: pg.url("botdir"), poolMax: 2 });
  const env = appEnv({ databaseUrl: pg.url("botdir"), redisUrl: redis.url, keys });
  [api, ingest, dispatcher] = await Promise.all([
    startApp("api", env),
    startApp("vote-ingest", env),
    startApp("webhook-dispatcher", env),
  ]);
}, 90_000);

afterAll(async () => {
  await stopAll();
  await db?.close();
  await pg?.destroy();
  await redis?.kill();
  await receiver?.close();
});

function expectJsonError(r: { status: number; body: unknown; text: string }, status: number) {
  expect({ status: r.status, text: r.text }).toEqual({ status, text: expect.any(String) });
  const body = r.body as Record<string, unknown> | null;
  expect(body).not.toBeNull();
  expect(typeof body?.error).toBe("string");
  expect(String(body?.error)).toMatch(/^[A-Z].*\.$/);
}

describe("PostgreSQL stopped and started again", () => {
  it("when PostgreSQL is down, then writes and reads answer the JSON 500 with Retry-After within 5 s (ten times the connect timeout), health and readiness are 503 naming PostgreSQL, and after it returns the same processes serve again", async () => {
    const bot = await seedWebhookBot(db, keys, receiver.url("/hook"));
    const auth = { authorization: bot.token };
    const stats = () =>
      call(`${api.base}/api/v1/bots/${bot.id}/stats`, {
        method: "POST",
        headers: auth,
        body: { server_count: 7 },
      });
    const commands = () =>
      call(`${api.base}/api/v1/bots/${bot.id}/commands`, {
        method: "PUT",
        headers: auth,
        body: { commands: [{ name: "ping", description: "Pong." }] },
      });
    const createBot = () =>
      call(`${ingest.base}/internal/v1/bots`, {
        method: "POST",
        headers: { authorization: keys.internalKey },
        body: { id: `1${String(Date.now()).padStart(17, "0")}` },
      });
    expect((await stats()).status).toBe(200);
    expect((await castVote(ingest.base, keys.internalKey, bot.id, randomUserId())).status).toBe(201);
    await waitFor(() => receiver.requests.length === 1, "the first webhook", 20_000);

    await pg.stop();

    const writes = await Promise.all([
      stats(),
      commands(),
      castVote(ingest.base, keys.internalKey, bot.id, randomUserId()),
      createBot(),
    ]);
    // Failing fast: a stopped PostgreSQL refuses connections at once, and a connect gives up after
    // DB_CONNECT_TIMEOUT_MS (500 ms); FAST_MS is ten times that and half the client's 10 s deadline.
    for (const w of writes) {
      expectJsonError(w, 500);
      expect(w.ms).toBeLessThan(FAST_MS);
      expect(w.body).toEqual({ error: "The request could not be completed; retry with backoff." });
      expect(w.headers.get("retry-after")).toBe("5");
    }
    const reads = await Promise.all([
      call(`${api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, { headers: auth }),
      call(`${api.base}/api/v1/bots/${bot.id}/votes`, { headers: auth }),
    ]);
    for (const r of reads) {
      expectJsonError(r, 500);
      expect(r.ms).toBeLessThan(FAST_MS);
      expect(r.headers.get("retry-after")).toBe("5");
    }
    // A listed bot's badge cannot be computed: the "unavailable" badge with 503, never "not listed".
    const widget = await call(`${api.base}/widget/${bot.id}.svg`);
    expect(widget.status).toBe(503);
    expect(widget.text).toContain("unavailable");
    expect(widget.text).not.toContain("not listed");

    const healths = await Promise.all([
      call(`${api.base}/api/health`),
      call(`${ingest.base}/health`),
      call(`${dispatcher.base}/health`),
    ]);
    for (const h of healths) {
      expect(h.status).toBe(503);
      expect(h.ms).toBeLessThan(FAST_MS);
      expect(h.body).toEqual({
        status: "unavailable",
        checks: { postgres: "down", redis: "ok" },
        error: "PostgreSQL is unreachable.",
      });
    }
    // Readiness names PostgreSQL too (every app needs it); liveness does not depend on it.
    for (const app of [api, ingest, dispatcher]) {
      const ready = await call(`${app.base}/readyz`);
      expect(ready.status).toBe(503);
      expect(ready.ms).toBeLessThan(FAST_MS);
      expect(ready.body).toMatchObject({ status: "unavailable", error: "PostgreSQL is unreachable." });
      expect((await call(`${app.base}/livez`)).status).toBe(200);
    }
    expect([api.alive(), ingest.alive(), dispatcher.alive()]).toEqual([true, true, true]);

    await pg.start();

    for (const app of [api, ingest, dispatcher]) {
      const path = app === api ? "/api/health" : "/health";
      await waitFor(
        async () => (await call(`${app.base}${path}`)).status === 200,
        `${app.app} health`,
        15_000,
      );
    }
    expect((await stats()).status).toBe(200);
    expect((await commands()).status).toBe(200);
    expect((await createBot()).status).toBe(201);
    const voter = randomUserId();
    expect((await castVote(ingest.base, keys.internalKey, bot.id, voter)).status).toBe(201);
    await waitFor(
      () => receiver.requests.some((r) => JSON.parse(r.body.toString()).user_id === voter),
      "the webhook of a vote cast after recovery",
      20_000,
    );
    // The vote refused with 500 during the outage wrote nothing: two votes, two deliveries.
    expect((await deliveriesOf(db, bot.id)).length).toBe(2);
    expect([api.alive(), ingest.alive(), dispatcher.alive()]).toEqual([true, true, true]);
  });
});
