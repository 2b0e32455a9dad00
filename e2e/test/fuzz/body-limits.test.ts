/**
 * Oversized, deeply nested and compressed-bomb JSON bodies on every endpoint that takes a body:
 * refused with a JSON 4xx, quickly, without the process's memory blowing up.
 */
import { randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { createSecretBox } from "@botdir/db";
import { seedBot } from "@botdir/db/testing";
import type { RedisClient } from "@botdir/service-kit";
import { systemClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import { createApp as createApi } from "../../../apps/api/src/app.js";
import { createApp as createIngest } from "../../../apps/vote-ingest/src/app.js";
import { checkAnswer, destroyAgent, type RawRequest, type Served, send, serve } from "../../src/fuzz.js";
import { startStores, type TestStores } from "../../src/stack.js";

const KEY = `ik_${randomBytes(16).toString("hex")}`;
let t: TestStores;
let redis: RedisClient;
let api: Served;
let ingest: Served;
let bot: { id: string; token: string };

beforeAll(async () => {
  t = await startStores();
  redis = t.redis;
  const seeded = await seedBot(t.db);
  bot = { id: seeded.id, token: seeded.token ?? "" };
  api = await serve(
    createApi({ db: t.db, redis, clock: systemClock, logger: silentLogger, redisPrefix: t.prefix }),
  );
  ingest = await serve(
    createIngest({
      db: t.db,
      redis,
      clock: systemClock,
      logger: silentLogger,
      internalApiKey: KEY,
      secretBox: createSecretBox(randomBytes(32)),
      webhookResolver: null,
    }),
  );
});

afterAll(async () => {
  destroyAgent();
  await api?.close();
  await ingest?.close();
  await t?.close();
});

const DEPTH = 100_000;
const deepArray = (depth = DEPTH) => "[".repeat(depth) + "]".repeat(depth);
const deepObject = () => `${'{"a":'.repeat(DEPTH)}1${"}".repeat(DEPTH)}`;

/** Each endpoint with a body, its server, its credential, and a body that wraps a nested value. */
function endpoints() {
  const botAuth = { authorization: bot.token };
  const keyAuth = { authorization: KEY };
  return [
    {
      name: "PUT /api/v1/bots/{id}/commands",
      on: api,
      method: "PUT",
      path: `/api/v1/bots/${bot.id}/commands`,
      auth: botAuth,
      wrap: (v: string) => `{"commands":[{"name":"deep","description":"d","options":${v}}]}`,
    },
    {
      name: "POST /api/v1/bots/{id}/stats",
      on: api,
      method: "POST",
      path: `/api/v1/bots/${bot.id}/stats`,
      auth: botAuth,
      wrap: (v: string) => `{"server_count":1,"users":${v}}`,
    },
    {
      name: "POST /api/v1/bots/stats",
      on: api,
      method: "POST",
      path: "/api/v1/bots/stats",
      auth: botAuth,
      wrap: (v: string) => `{"server_count":${v}}`,
    },
    {
      name: "POST /internal/v1/votes",
      on: ingest,
      method: "POST",
      path: "/internal/v1/votes",
      auth: keyAuth,
      wrap: (v: string) => `{"bot_id":"${bot.id}","user_id":${v}}`,
    },
    {
      name: "POST /internal/v1/bots",
      on: ingest,
      method: "POST",
      path: "/internal/v1/bots",
      auth: keyAuth,
      wrap: (v: string) => `{"id":${v}}`,
    },
    {
      name: "PUT /internal/v1/bots/{id}/webhook",
      on: ingest,
      method: "PUT",
      path: `/internal/v1/bots/${bot.id}/webhook`,
      auth: keyAuth,
      wrap: (v: string) => `{"url":${v}}`,
    },
    {
      name: "POST /internal/v1/bots/{id}/approve",
      on: ingest,
      method: "POST",
      path: `/internal/v1/bots/${bot.id}/approve`,
      auth: keyAuth,
      wrap: (v: string) => `{"x":${v}}`,
    },
  ];
}

const ENDPOINT_NAMES = [
  "PUT /api/v1/bots/{id}/commands",
  "POST /api/v1/bots/{id}/stats",
  "POST /api/v1/bots/stats",
  "POST /internal/v1/votes",
  "POST /internal/v1/bots",
  "PUT /internal/v1/bots/{id}/webhook",
  "POST /internal/v1/bots/{id}/approve",
];

async function expectRefused(req: RawRequest, port: number, statuses: number[], refused = true) {
  const heapBefore = process.memoryUsage().heapUsed;
  const started = Date.now();
  const res = await send(port, req, 10_000);
  const ms = Date.now() - started;
  checkAnswer(req, res, statuses);
  expect({ status: res.status, fast: ms < 2_000 }).toEqual({ status: expect.any(Number), fast: true });
  expect(statuses).toContain(res.status);
  if (refused) expect(res.status).toBeGreaterThanOrEqual(400);
  // No blow-up: far less than the 100 MB a decompressed bomb would take.
  expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(64 * 1024 ** 2);
  return res;
}

describe("body limits", () => {
  it.each(ENDPOINT_NAMES)(
    "when %s gets a 2 MB body, a 100k-level nested array or object, or a gzip bomb, then each is a JSON 4xx within 2 s",
    async (name) => {
      const e = endpoints().find((x) => x.name === name);
      if (!e) throw new Error(`no endpoint ${name}`);
      const headers = { ...e.auth, "content-type": "application/json" };
      const port = e.on.port;
      const oversized = Buffer.from(e.wrap(JSON.stringify("x".repeat(2 * 1024 ** 2))));
      const res = await expectRefused(
        { method: e.method, path: e.path, headers, body: oversized },
        port,
        [413],
      );
      expect(JSON.parse(res.body.toString())).toEqual({ error: "The request body is too large." });

      // 100k levels (200 kB): over the small limits, and refused by depth on commands.
      for (const nested of [deepArray(), deepObject()]) {
        const req = { method: e.method, path: e.path, headers, body: Buffer.from(e.wrap(nested)) };
        await expectRefused(req, port, [400, 413]);
      }
      // 4k levels (8 kB, under every limit): stored fields refuse it (400); a field the endpoint
      // ignores (stats' "users", approve's body) may be accepted. Never a 5xx, always fast.
      const under = { method: e.method, path: e.path, headers, body: Buffer.from(e.wrap(deepArray(4_000))) };
      await expectRefused(under, port, e.name.includes("commands") ? [400] : [200, 400, 413], false);
      // 100 MB of JSON whitespace, 100 kB on the wire: the limit applies to the inflated size.
      const bomb = gzipSync(Buffer.concat([Buffer.from(e.wrap(`"${" ".repeat(100 * 1024 ** 2)}"`))]));
      expect(bomb.length).toBeLessThan(200 * 1024);
      await expectRefused(
        { method: e.method, path: e.path, headers: { ...headers, "content-encoding": "gzip" }, body: bomb },
        port,
        [400, 413, 415],
      );
      // The server is still serving.
      const ok = await send(port, {
        method: "GET",
        path: e.on === api ? "/api/health" : "/health",
        headers: {},
      });
      expect(ok.status).toBe(200);
    },
  );
});
