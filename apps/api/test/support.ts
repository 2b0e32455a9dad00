/** Shared fixtures of the API tests: real PostgreSQL and Redis, one database and key prefix per file. */

import { once } from "node:events";
import { createServer, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import {
  createTestDatabase,
  type TestDatabase,
  testRedisPrefix,
  testRedisUrl,
  useForFile,
} from "@botdir/db/testing";
import { type Logger, ManualClock } from "@botdir/service-kit";
import { connectRedis } from "@botdir/service-kit/testing";
import { Redis } from "ioredis";
import request from "supertest";
import { type ApiApp, createApp } from "../src/app.js";
import type { ApiDeps } from "../src/deps.js";
import { createTokenSet, type TokenSet, type TokenSetOptions } from "../src/services/token-set.js";

export const USER = "987654321098765432";

/** GET /api/v1/bots/{id}/check for USER, authorized with the bot's token. */
export const checkVote = (app: RequestListener, bot: { id: string; token?: string | null }) =>
  request(app)
    .get(`/api/v1/bots/${bot.id}/check`)
    .query({ userId: USER })
    .set({ Authorization: bot.token as string });

/**
 * Asserts the exact answer: `status`, the JSON content type, and `body` to the byte (key order and
 * nulls are part of what clients parse).
 */
export function expectAnswer(res: request.Response, status: number, body: string): void {
  expect(res.status).toBe(status);
  expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
  expect(res.text).toBe(body);
}

/** A logger that keeps every line, so tests can look for events and for leaked secrets. */
export class CapturingLogger implements Logger {
  readonly lines: { level: string; obj: object; msg?: string | undefined }[] = [];
  info(obj: object, msg?: string): void {
    this.lines.push({ level: "info", obj, msg });
  }
  warn(obj: object, msg?: string): void {
    this.lines.push({ level: "warn", obj, msg });
  }
  error(obj: object, msg?: string): void {
    this.lines.push({ level: "error", obj, msg });
  }
  text(): string {
    return JSON.stringify(this.lines);
  }
  events(name: string): object[] {
    return this.lines.map((l) => l.obj).filter((o) => (o as { event?: string }).event === name);
  }
}

/** A fail-fast connection to the test Redis (as the app's limiter uses), ready for commands. */
export function failFastRedis(url = testRedisUrl()): Promise<Redis> {
  return connectRedis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
}

/** A client of a port nothing listens on: every command fails at once, like a stopped Redis. */
export function deadRedis(): Redis {
  const redis = new Redis("redis://127.0.0.1:1", {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
    retryStrategy: () => null,
  });
  redis.on("error", () => {});
  return redis;
}

export interface Harness {
  t: TestDatabase;
  redis: Redis;
  prefix: string;
  clock: ManualClock;
  logger: CapturingLogger;
  /** A fresh app on this file's database and Redis prefix; overrides for limits etc. */
  app(overrides?: Partial<ApiDeps>): ApiApp;
  close(): Promise<void>;
}

export async function createHarness(): Promise<Harness> {
  const t = await createTestDatabase();
  const redis = await failFastRedis();
  const prefix = testRedisPrefix();
  const clock = new ManualClock("2026-11-21T12:00:00.000Z");
  const logger = new CapturingLogger();
  return {
    t,
    redis,
    prefix,
    clock,
    logger,
    app: (overrides = {}) =>
      createApp({
        db: t.db,
        redis,
        clock,
        logger,
        redisPrefix: prefix,
        // Generous on a shared CI machine so exact-header tests never fail open by accident;
        // the fail-open tests use the real default.
        limiterTimeoutMs: 2_000,
        // A loaded CI machine's own lag must not shed a test's unknown tokens or badges; the
        // flood budget's tests set it.
        flood: false,
        ...overrides,
      }),
    async close() {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
      await t.drop();
    },
  };
}

/**
 * This test file's harness: created before its tests (beforeAll) and closed after them (afterAll).
 * `h` reads the harness inside tests; `app` is the app with `appOverrides`, built on first use.
 */
export function useHarness(appOverrides: Partial<ApiDeps> = {}): { h: Harness; app: RequestListener } {
  const h = useForFile("the harness", createHarness, (harness) => harness.close());
  let built: ApiApp | undefined;
  const app: RequestListener = (req, res) => {
    built ??= h.app(appOverrides);
    built(req, res);
  };
  return { h, app };
}

/** Appends a vote to the log and sets the user's window, as vote-ingest does. */
export async function castVote(t: TestDatabase, botId: string, userId: string, votedAt: Date): Promise<void> {
  const vote = await t.db.prisma.vote.create({ data: { botId, userId, votedAt } });
  await t.db.prisma.voteWindow.upsert({
    where: { botId_userId: { botId, userId } },
    create: { botId, userId, votedAt, voteId: vote.id },
    update: { votedAt, voteId: vote.id },
  });
}

/** `app` behind a real listener on a free port of 127.0.0.1, for raw sockets and concurrent fetches. */
export async function listen(
  app: RequestListener,
): Promise<{ port: number; base: string; close(): Promise<void> }> {
  const server = createServer(app);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Makes PostgreSQL refuse every UPDATE of bot `botId` ('disk full (simulated)'), as a failing disk
 * would; the function returned lifts the refusal.
 */
export async function refuseBotUpdates(t: TestDatabase, botId: string): Promise<() => Promise<void>> {
  const trigger = `refuse_bot_${botId}`;
  await t.db.pool.query(`
    CREATE OR REPLACE FUNCTION refuse_bot_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'disk full (simulated)'; END; $$`);
  await t.db.pool.query(
    `CREATE TRIGGER ${trigger} BEFORE UPDATE ON bots FOR EACH ROW WHEN (NEW.id = '${botId}') EXECUTE FUNCTION refuse_bot_update()`,
  );
  return async () => {
    await t.db.pool.query(`DROP TRIGGER ${trigger} ON bots`);
  };
}

export const cmd = (name: string, description = "Does a thing") => ({ name, description });

/**
 * Token sets for this file's tests, each stopped after its test: `fresh()` starts one on the
 * harness's database and waits until it is fresh; `started(options)` starts one as given (a set
 * that never gets fresh, say) without waiting.
 */
export function useTokenSets(h: Harness): {
  fresh: () => Promise<TokenSet>;
  started: (options: Omit<TokenSetOptions, "logger">) => TokenSet;
} {
  const sets: TokenSet[] = [];
  afterEach(async () => {
    for (const set of sets.splice(0)) await set.stop();
  });
  const started = (options: Omit<TokenSetOptions, "logger">) => {
    const set = createTokenSet({ logger: h.logger, ...options });
    sets.push(set);
    set.start();
    return set;
  };
  const fresh = async () => {
    const set = started({ connect: () => h.t.db.connectDedicated(), reconnectDelayMs: 50 });
    await set.whenFresh();
    return set;
  };
  return { fresh, started };
}
