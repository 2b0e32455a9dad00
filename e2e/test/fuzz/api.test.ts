/**
 * Property-based hostile input against every public endpoint of the API, served in-process on a
 * real socket (real PostgreSQL and Redis): arbitrary methods, path ids, query strings, headers,
 * content types and bodies. Every answer is a status the spec (or docs/api.md) lists, errors are
 * the JSON error body, and nothing is ever a 5xx. Seeded: FUZZ_SEED / FUZZ_RUNS reproduce a run.
 */
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import fc from "fast-check";
import {
  authorization,
  endpointRequests,
  FUZZ_RUNS,
  FUZZ_SEED,
  fuzzEndpoints,
  method,
  pathSegment,
  queryString,
  useServedApp,
} from "../../src/fuzz.js";
import { apiOn } from "../../src/in-process.js";

let own: { id: string; token: string };
let other: { id: string; token: string };
let ids: string[];
let tokens: string[];

const served = useServedApp("API fuzz", "/api/health", async (t, logger) => {
  const a = await seedBot(t.db, { serverCount: 5 });
  const b = await seedBot(t.db);
  own = { id: a.id, token: a.token ?? "" };
  other = { id: b.id, token: b.token ?? "" };
  ids = [own.id, own.id, other.id, randomBotId()];
  tokens = [own.token, own.token, own.token, other.token, "unknown-token-value-0123456789abcdefghijk"];
  // High limits so most requests reach the body and query checks; /votes keeps a low one so the
  // 429 answer is exercised too.
  return apiOn(t, {
    logger,
    limits: { commands: 1_000_000, stats: 1_000_000, check: 1_000_000, votes: 300 },
  });
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
  return endpointRequests({
    method: method(opts.ownMethod),
    // A doubled slash inside the path, beside the trailing one endpointRequests adds.
    path: fc.oneof(
      { weight: 4, arbitrary: path },
      { weight: 1, arbitrary: path.map((p) => p.replace("/bots", "//bots")) },
    ),
    query: opts.query ?? queryString(["x"], ["1"]),
    auth: opts.withAuth === false ? fc.constant(undefined) : authorization(tokens),
    shaped: opts.shaped,
  });
}

const userIds = () => [randomUserId(), "123456789012345678", "12345678901234567890"];

describe(`hostile input on the public API (seed ${FUZZ_SEED})`, () => {
  fuzzEndpoints(
    () => served.port,
    [
      {
        title:
          "when PUT /api/v1/bots/{id}/commands gets arbitrary requests, then every answer is 200/400/401/404/405/413/429 with the JSON error body, never a 5xx",
        requests: () =>
          requests({ ownMethod: "PUT", path: (id) => `/api/v1/bots/${id}/commands`, shaped: commandsBody }),
        allowed: WRITE_ALLOWED,
        answered: [200, 400],
      },
      {
        title:
          "when POST /api/v1/bots/{id}/stats (and the alias without an id) gets arbitrary requests, then every answer is listed, JSON on error, never a 5xx",
        requests: () =>
          requests({
            ownMethod: "POST",
            path: (id) => `/api/v1/bots/${id}/stats`,
            alias: "/api/v1/bots/stats",
            shaped: statsBody,
          }),
        allowed: WRITE_ALLOWED,
        answered: [200, 400],
      },
      {
        title:
          "when GET /api/v1/bots/{id}/check gets arbitrary requests, then every answer is 200/400/401/404/405/429, JSON on error, never a 5xx",
        requests: () =>
          requests({
            ownMethod: "GET",
            path: (id) => `/api/v1/bots/${id}/check`,
            alias: "/api/v1/bots/check",
            query: queryString(["userId", "userid", "user_id"], userIds()),
            shaped: anyBody,
          }),
        allowed: READ_ALLOWED,
        answered: [200],
      },
      {
        title:
          "when GET /api/v1/bots/{id}/votes gets arbitrary requests, then every answer is 200/400 (malformed URL)/401/404/405/429, JSON on error, never a 5xx",
        requests: () =>
          requests({
            ownMethod: "GET",
            path: (id) => `/api/v1/bots/${id}/votes`,
            alias: "/api/v1/bots/votes",
            query: queryString(["limit"], ["1", "50", "100", "0", "1000"]),
            shaped: anyBody,
          }),
        allowed: READ_ALLOWED,
        answered: [200, 429],
      },
      {
        title:
          "when GET /widget/{id}.svg gets arbitrary requests, then every answer is 200 (badge)/400/404/405, never a 5xx",
        requests: () =>
          requests({ ownMethod: "GET", path: (id) => `/widget/${id}.svg`, shaped: anyBody, withAuth: false }),
        allowed: [200, 400, 404, 405],
        answered: [200],
      },
      {
        title: "when GET /api/health gets arbitrary requests, then every answer is 200 or 405, never a 5xx",
        requests: () => requests({ ownMethod: "GET", path: () => "/api/health", shaped: anyBody }),
        allowed: [200, 405],
        runs: Math.ceil(FUZZ_RUNS / 2),
        answered: [200],
      },
      {
        title:
          "when GET /api/v1/openapi.json gets arbitrary requests, then every answer is 200 or 405, never a 5xx",
        requests: () => requests({ ownMethod: "GET", path: () => "/api/v1/openapi.json", shaped: anyBody }),
        allowed: [200, 405],
        runs: Math.ceil(FUZZ_RUNS / 2),
        answered: [200],
      },
    ],
  );
});
