/**
 * Property-based requests derived from the OpenAPI documents themselves — the API's
 * `GET /api/v1/openapi.json` and vote-ingest's `GET /internal/v1/openapi.json`, read from the
 * running apps — for every operation: its path and query parameters, its security header and its
 * JSON body, each valid, at a bound, or invalid (fuzz-openapi.ts). Every answer must be a status
 * the operation documents, never a 5xx, with a body that matches the document's schema for that
 * status. A fixed seed (FUZZ_SEED) with OPENAPI_FUZZ_RUNS cases per operation, then
 * OPENAPI_FUZZ_RANDOM_RUNS more under a seed of the run's own (printed, to reproduce a failure).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createSecretBox } from "@botdir/db";
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import type { Logger } from "@botdir/service-kit";
import fc from "fast-check";
import { FUZZ_SEED, headerValue, type Served, send, serve, watchServedApp } from "../../src/fuzz.js";
import {
  answerChecker,
  type FuzzHints,
  fuzzOperation,
  type OpenApiDocument,
  operationsOf,
} from "../../src/fuzz-openapi.js";
import { apiOn, ingestOn } from "../../src/in-process.js";
import { startStores, type TestStores } from "../../src/stack.js";

const RUNS = Number(process.env.OPENAPI_FUZZ_RUNS ?? 40);
const RANDOM_RUNS = Number(process.env.OPENAPI_FUZZ_RANDOM_RUNS ?? 10);
const RANDOM_SEED = Number(process.env.OPENAPI_FUZZ_RANDOM_SEED ?? Date.now() % 2 ** 31);

const KEY = `ik_${randomBytes(16).toString("hex")}`;
const HIGH = 1_000_000;

let stores: TestStores;
let api: Served;
let ingest: Served;
let receiver: Server;
const logger: { api?: Logger; ingest?: Logger } = {};
const apiWatch = watchServedApp("/api/health", () => api.port);
const ingestWatch = watchServedApp("/health", () => ingest.port);
logger.api = apiWatch.logger;
logger.ingest = ingestWatch.logger;

/** A credential that passes (`prefix` + the value) and near misses of it. */
function credential(real: string, prefixes: string[]) {
  return {
    real,
    misses: fc.oneof(
      fc.constantFrom(...prefixes.map((p) => `${p}${real}`)),
      fc.constant(`${real}x`),
      fc.constant(real.slice(0, -1)),
      fc.constant(undefined),
      headerValue(60),
    ),
  };
}

/** A delivery of `botId` in `state` with one attempt, as the dispatcher leaves it. */
async function seedDelivery(botId: string, state: "pending" | "delivered" | "failed"): Promise<string> {
  const vote = await stores.db.prisma.vote.create({
    data: { botId, userId: randomUserId(), votedAt: new Date(Date.now() - 3_600_000) },
  });
  const id = randomUUID();
  const at = new Date(Date.now() - 3_500_000);
  await stores.db.prisma.delivery.create({
    data: {
      id,
      botId,
      voteId: vote.id,
      state,
      attemptsMade: 1,
      nextAttemptAt: at,
      ...(state === "pending" ? {} : { completedAt: at }),
    },
  });
  await stores.db.prisma.attempt.create({
    data: {
      deliveryId: id,
      botId,
      series: 0,
      attemptNumber: 1,
      statusCode: state === "delivered" ? 204 : 500,
      errorKind: state === "delivered" ? null : "http_status",
      durationMs: 12,
      attemptedAt: at,
    },
  });
  return id;
}

const cursorOf = (botId: string, ms: number, voteId: number | string) =>
  Buffer.from(`1.${botId}.${ms}.${voteId}`).toString("base64url");

const apiHints = {} as FuzzHints;
const ingestHints = {} as FuzzHints;
let resetApi: () => Promise<unknown>;
let resetIngest: () => Promise<unknown>;

beforeAll(async () => {
  stores = await startStores();
  receiver = createServer((_req, res) => {
    res.statusCode = 204;
    res.end();
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

  // The API's bots: one with votes and deliveries of every state, one other.
  const box = createSecretBox(randomBytes(32));
  const withWebhook = (id: string) =>
    stores.db.prisma.bot.update({
      where: { id },
      data: {
        webhookUrl: hook,
        webhookSecretEncrypted: box.encrypt(`whsec_${randomBytes(16).toString("hex")}`),
      },
    });
  const own = await seedBot(stores.db, { serverCount: 5 });
  const other = await seedBot(stores.db);
  await withWebhook(own.id);
  resetApi = () => withWebhook(own.id);
  const deliveries = [
    await seedDelivery(own.id, "delivered"),
    await seedDelivery(own.id, "failed"),
    await seedDelivery(own.id, "pending"),
  ];
  const voters = [randomUserId(), randomUserId()];
  await stores.db.prisma.vote.createMany({
    data: voters.map((userId, i) => ({
      botId: own.id,
      userId,
      votedAt: new Date(Date.now() - 60_000 * (i + 1)),
    })),
  });
  Object.assign(apiHints, {
    values: {
      id: [own.id, own.id, other.id, randomBotId()],
      deliveryId: [...deliveries, randomUUID()],
      userId: [...voters, randomUserId()],
      cursor: [
        cursorOf(own.id, Date.now() - 86_400_000, 1),
        cursorOf(own.id, 0, 0),
        cursorOf(other.id, 0, 0),
      ],
    },
    security: {
      botToken: credential(own.token ?? "", ["", "Bearer ", "Bot "]),
    },
  } satisfies FuzzHints);

  // vote-ingest's bots, apart from the API's (a token rotation here must not change the API's runs).
  const approved = await seedBot(stores.db);
  const pending = await seedBot(stores.db, { status: "pending" });
  await withWebhook(approved.id);
  // An earlier operation may have cleared or re-keyed the webhook, or approved the pending bot.
  resetIngest = async () => {
    await withWebhook(approved.id);
    await stores.db.prisma.bot.update({
      where: { id: pending.id },
      data: { status: "pending", approvedAt: null },
    });
  };
  const ingestDeliveries = [
    await seedDelivery(approved.id, "delivered"),
    await seedDelivery(approved.id, "failed"),
    await seedDelivery(approved.id, "pending"),
  ];
  Object.assign(ingestHints, {
    values: {
      id: [approved.id, approved.id, pending.id, randomBotId()],
      bot_id: [approved.id, pending.id, randomBotId()],
      user_id: [randomUserId(), randomUserId()],
      deliveryId: [...ingestDeliveries, randomUUID()],
      url: [hook, "https://hooks.example.com/votes", "https://127.0.0.1/x"],
      // enable's optional recoverSince: a time a recovery takes (an hour ago), and one it refuses.
      recoverSince: [new Date(Date.now() - 3_600_000).toISOString(), "2026-01-01T00:00:00Z"],
    },
    security: { internalKey: credential(KEY, ["", "Bearer "]) },
  } satisfies FuzzHints);

  api = await serve(
    apiOn(stores, {
      ...(logger.api ? { logger: logger.api } : {}),
      limits: { stats: HIGH, commands: HIGH, check: HIGH, votes: HIGH, deliveries: HIGH, redeliver: HIGH },
    }),
  );
  ingest = await serve(
    ingestOn(stores, {
      ...(logger.ingest ? { logger: logger.ingest } : {}),
      internalApiKey: KEY,
      secretBox: box,
      // Local webhook targets (the receiver above) are allowed, and every host name resolves to
      // loopback: no generated URL ever leaves the machine or waits for a nameserver.
      allowPrivateTargets: true,
      webhookResolver: async () => ["127.0.0.1"],
    }),
  );
  // The page's own assets (named by content), so /docs/assets/{file} is asked for real files too.
  const page = (await send(api.port, { method: "GET", path: "/docs", headers: {} })).body.toString("utf8");
  apiHints.values.file = [...page.matchAll(/\/docs\/assets\/([^"'?#]+)/g)].map((m) => m[1] as string);
  expect(apiHints.values.file.length).toBeGreaterThan(0);
  console.log(
    `OpenAPI fuzz: FUZZ_SEED=${FUZZ_SEED} OPENAPI_FUZZ_RUNS=${RUNS}, then OPENAPI_FUZZ_RANDOM_SEED=${RANDOM_SEED} OPENAPI_FUZZ_RANDOM_RUNS=${RANDOM_RUNS}`,
  );
});

afterAll(async () => {
  await api?.close();
  await ingest?.close();
  await new Promise((resolve) => receiver?.close(resolve));
  await stores?.close();
});

async function documentOf(
  port: number,
  path: string,
  headers: Record<string, string>,
): Promise<OpenApiDocument> {
  const res = await send(port, { method: "GET", path, headers });
  expect(res.status).toBe(200);
  return JSON.parse(res.body.toString("utf8")) as OpenApiDocument;
}

/** fast-check's report with the check's own message (its cause) first. */
const failure = (error: Error) => `${(error.cause as Error | undefined)?.message ?? ""}\n${error.message}`;

/**
 * Operations whose success path needs state the generated values cannot reach (a recovery needs a
 * `since` inside the last 14 days and no recovery running; its status needs a recovery id): they
 * are fuzzed for documented answers and no 5xx here, and their successes are asserted by
 * e2e/test/webhook-recover.test.ts and apps/vote-ingest/test/recovery.test.ts.
 */
const SUCCESS_ELSEWHERE = new Set([
  "/api/v1/bots/{id}/webhook/recover",
  "/api/v1/bots/{id}/webhook/recoveries/{recoveryId}",
  "/internal/v1/bots/{id}/webhook/recover",
  "/internal/v1/bots/{id}/webhook/recoveries/{recoveryId}",
]);

/** One test per operation of the document the app serves, run once seeded, once at random. */
function fuzzDocument(
  label: string,
  input: () => {
    port: number;
    path: string;
    headers: Record<string, string>;
    hints: FuzzHints;
    /** Puts the seeded state back before each operation (an earlier one may have cleared a webhook). */
    reset: () => Promise<unknown>;
  },
) {
  // The operations are known only once the app serves its document: one test walks them all,
  // naming the operation in any failure.
  it(`when every operation of ${label} gets requests generated from its parameters and body schemas, then every answer is a documented status with a body matching its schema, never a 5xx`, async () => {
    const { port, path, headers, hints, reset } = input();
    const doc = await documentOf(port, path, headers);
    const check = answerChecker(doc, `${label.replace(/\W+/g, "-")}.json`);
    const operations = operationsOf(doc);
    expect(operations.length).toBeGreaterThan(10);
    const unanswered: string[] = [];
    for (const op of operations) {
      const name = `${op.method} ${op.path}`;
      await reset();
      const fixed = await fuzzOperation({ port, op, doc, hints, check, seed: FUZZ_SEED, runs: RUNS }).catch(
        (error: Error) => {
          throw new Error(`${name} (seed ${FUZZ_SEED}): ${failure(error)}`);
        },
      );
      await fuzzOperation({ port, op, doc, hints, check, seed: RANDOM_SEED, runs: RANDOM_RUNS }).catch(
        (error: Error) => {
          throw new Error(`${name} (OPENAPI_FUZZ_RANDOM_SEED=${RANDOM_SEED}): ${failure(error)}`);
        },
      );
      // The generated values reach the operation's success path, not only its refusals.
      if (!SUCCESS_ELSEWHERE.has(op.path) && ![...fixed.keys()].some((status) => status < 300)) {
        unanswered.push(`${name}: ${[...fixed.keys()]}`);
      }
    }
    expect(unanswered).toEqual([]);
  });
}

describe("the answer check", () => {
  it("when a status is not documented, a 5xx comes, or a body does not match its status's schema, then it fails naming why", async () => {
    const doc = await documentOf(api.port, "/api/v1/openapi.json", {});
    const check = answerChecker(doc, "check-test.json");
    const op = operationsOf(doc).find((o) => o.method === "GET" && o.path === "/api/v1/bots/{id}/check");
    if (op === undefined) throw new Error("no check operation");
    const req = { method: "GET", path: "/api/v1/bots/1/check", headers: {} };
    const json = (status: number, body: unknown) => ({
      status,
      headers: { "content-type": "application/json; charset=utf-8" },
      body: Buffer.from(JSON.stringify(body)),
    });
    const outside = { voted: 0, hasVoted: false, votedAt: null, nextVoteAt: null };
    expect(() => check(op, req, json(200, outside))).not.toThrow();
    expect(() => check(op, req, json(200, { ...outside, voted: 2 }))).toThrow(/does not match the document/);
    expect(() => check(op, req, json(200, { voted: 0 }))).toThrow(/does not match the document/);
    expect(() => check(op, req, json(409, { error: "Conflict." }))).toThrow(/status 409 is not one of/);
    expect(() => check(op, req, json(500, { error: "Failed." }))).toThrow(/status 500/);
  });
});

describe("requests generated from the OpenAPI documents", () => {
  fuzzDocument("the API", () => ({
    port: api.port,
    path: "/api/v1/openapi.json",
    headers: {},
    hints: apiHints,
    reset: resetApi,
  }));
  fuzzDocument("vote-ingest", () => ({
    port: ingest.port,
    path: "/internal/v1/openapi.json",
    headers: { authorization: KEY },
    hints: ingestHints,
    reset: resetIngest,
  }));
});
