/**
 * Property-based hostile input against every public endpoint of the API, served in-process on a
 * real socket (real PostgreSQL and Redis): arbitrary methods, path ids, query strings, headers,
 * content types and bodies. Every answer is a status the spec (or docs/api.md) lists, errors are
 * the JSON error body, and nothing is ever a 5xx. Seeded: FUZZ_SEED / FUZZ_RUNS reproduce a run.
 */
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import type { RedisClient } from "@botdir/service-kit";
import { systemClock } from "@botdir/service-kit";
import fc from "fast-check";
import { createApp } from "../../../apps/api/src/app.js";
import {
  authorization,
  body,
  build,
  contentType,
  extraHeaders,
  FUZZ_RUNS,
  FUZZ_SEED,
  fuzz,
  method,
  pathSegment,
  queryString,
  type Served,
  serve,
  watchServedApp,
} from "../../src/fuzz.js";
import { startStores, type TestStores } from "../../src/stack.js";

let t: TestStores;
let redis: RedisClient;
let served: Served;
let own: { id: string; token: string };
let other: { id: string; token: string };
let ids: string[];
let tokens: string[];
const { logger } = watchServedApp("/api/health", () => served.port);

beforeAll(async () => {
  t = await startStores();
  redis = t.redis;
  const a = await seedBot(t.db, { serverCount: 5 });
  const b = await seedBot(t.db);
  own = { id: a.id, token: a.token ?? "" };
  other = { id: b.id, token: b.token ?? "" };
  ids = [own.id, own.id, other.id, randomBotId()];
  tokens = [own.token, own.token, own.token, other.token, "unknown-token-value-0123456789abcdefghijk"];
  // High limits so most requests reach the body and query checks; /votes keeps a low one so the
  // 429 answer is exercised too.
  const app = createApp({
    db: t.db,
    redis,
    clock: systemClock,
    logger,
    redisPrefix: t.prefix,
    limits: { commands: 1_000_000, stats: 1_000_000, check: 1_000_000, votes: 300 },
  });
  served = await serve(app);
  console.log(`API fuzz: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_RUNS}`);
});

afterAll(async () => {
  await served?.close();
  await t?.close();
});

const command = fc.record(
  {
    name: fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.string({ unit: "grapheme", maxLength: 40 }),
      fc.jsonValue(),
    ),
    description: fc.oneof(fc.string({ maxLength: 120 }), fc.jsonValue()),
    type: fc.oneof(fc.constantFrom(1, 2, 3), fc.jsonValue()),
    options: fc.jsonValue({ maxDepth: 3 }),
    name_localizations: fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 40 }), {
      maxKeys: 3,
    }),
  },
  { requiredKeys: [] },
);
const commandsBody = fc.oneof(
  fc.record({ commands: fc.array(command, { maxLength: 120 }) }),
  fc.record({ commands: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: [] }),
);
const count = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.bigInt().map((b) => Number(b)),
  fc.string({ maxLength: 12 }),
  fc.constantFrom(null, true, [], {}, Number.MAX_SAFE_INTEGER + 2, -1, 1.5, "1482"),
  fc.array(fc.oneof(fc.integer(), fc.string({ maxLength: 4 }), fc.constant(null)), { maxLength: 5 }),
);
const statsBody = fc.oneof(
  fc.record({ server_count: fc.nat() }),
  fc.record(
    { shards: fc.array(fc.nat({ max: 1e6 }), { maxLength: 4 }), server_count: count },
    { requiredKeys: ["shards"] },
  ),
  fc.record(
    {
      server_count: count,
      guilds: count,
      guildCount: count,
      shards: count,
      shard_id: fc.jsonValue(),
      shard_count: fc.jsonValue(),
      users: fc.jsonValue(),
    },
    { requiredKeys: [] },
  ),
);
const anyBody = fc.jsonValue({ maxDepth: 3 });

const WRITE_ALLOWED = [200, 400, 401, 404, 405, 413, 429];
const READ_ALLOWED = [200, 400, 401, 404, 405, 429];

function requests(opts: {
  ownMethod: string;
  path: (id: string) => string;
  alias?: string;
  query?: fc.Arbitrary<string>;
  shaped: fc.Arbitrary<unknown>;
  withAuth?: boolean;
}) {
  const path = opts.alias
    ? fc.oneof(
        { weight: 4, arbitrary: pathSegment(ids).map(opts.path) },
        { weight: 1, arbitrary: fc.constant(opts.alias) },
      )
    : pathSegment(ids).map(opts.path);
  return fc
    .record({
      method: method(opts.ownMethod),
      path,
      query: opts.query ?? queryString(["x"], ["1"]),
      auth: opts.withAuth === false ? fc.constant(undefined) : authorization(tokens),
      contentType,
      body: body(opts.shaped),
      extra: extraHeaders,
      chunked: fc.boolean(),
      slashes: fc.constantFrom("", "", "", "/", "//"),
    })
    .map((p) =>
      build({
        ...p,
        path: `${p.slashes === "//" ? p.path.replace("/bots", "//bots") : p.path + p.slashes}${p.query}`,
      }),
    );
}

const userIds = () => [randomUserId(), "123456789012345678", "12345678901234567890"];

describe(`hostile input on the public API (seed ${FUZZ_SEED})`, () => {
  it("when PUT /api/v1/bots/{id}/commands gets arbitrary requests, then every answer is 200/400/401/404/405/413/429 with the JSON error body, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({ ownMethod: "PUT", path: (id) => `/api/v1/bots/${id}/commands`, shaped: commandsBody }),
      WRITE_ALLOWED,
    );
    expect(seen.get(200)).toBeGreaterThan(0);
    expect(seen.get(400)).toBeGreaterThan(0);
  });

  it("when POST /api/v1/bots/{id}/stats (and the alias without an id) gets arbitrary requests, then every answer is listed, JSON on error, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({
        ownMethod: "POST",
        path: (id) => `/api/v1/bots/${id}/stats`,
        alias: "/api/v1/bots/stats",
        shaped: statsBody,
      }),
      WRITE_ALLOWED,
    );
    expect(seen.get(200)).toBeGreaterThan(0);
    expect(seen.get(400)).toBeGreaterThan(0);
  });

  it("when GET /api/v1/bots/{id}/check gets arbitrary requests, then every answer is 200/400/401/404/405/429, JSON on error, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({
        ownMethod: "GET",
        path: (id) => `/api/v1/bots/${id}/check`,
        alias: "/api/v1/bots/check",
        query: queryString(["userId", "userid", "user_id"], userIds()),
        shaped: anyBody,
      }),
      READ_ALLOWED,
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when GET /api/v1/bots/{id}/votes gets arbitrary requests, then every answer is 200/400 (malformed URL)/401/404/405/429, JSON on error, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({
        ownMethod: "GET",
        path: (id) => `/api/v1/bots/${id}/votes`,
        alias: "/api/v1/bots/votes",
        query: queryString(["limit"], ["1", "50", "100", "0", "1000"]),
        shaped: anyBody,
      }),
      READ_ALLOWED,
    );
    expect(seen.get(200)).toBeGreaterThan(0);
    expect(seen.get(429)).toBeGreaterThan(0);
  });

  it("when GET /widget/{id}.svg gets arbitrary requests, then every answer is 200 (badge)/400/404/405, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({ ownMethod: "GET", path: (id) => `/widget/${id}.svg`, shaped: anyBody, withAuth: false }),
      [200, 400, 404, 405],
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when GET /api/health gets arbitrary requests, then every answer is 200 or 405, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({ ownMethod: "GET", path: () => "/api/health", shaped: anyBody }),
      [200, 405],
      Math.ceil(FUZZ_RUNS / 2),
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when GET /api/v1/openapi.json gets arbitrary requests, then every answer is 200 or 405, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests({ ownMethod: "GET", path: () => "/api/v1/openapi.json", shaped: anyBody }),
      [200, 405],
      Math.ceil(FUZZ_RUNS / 2),
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });
});
