/**
 * Property-based hostile input against every internal endpoint of vote-ingest (votes and listing
 * management), served in-process on a real socket: only the statuses docs/votes.md and
 * docs/management.md list, the JSON error body, never a 5xx. Seeded: FUZZ_SEED / FUZZ_RUNS.
 */
import { randomBytes } from "node:crypto";
import { createSecretBox } from "@botdir/db";
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import type { RedisClient } from "@botdir/service-kit";
import { systemClock } from "@botdir/service-kit";
import fc from "fast-check";
import { createApp } from "../../../apps/vote-ingest/src/app.js";
import {
  body,
  build,
  contentType,
  extraHeaders,
  FUZZ_RUNS,
  FUZZ_SEED,
  fuzz,
  headerValue,
  method,
  pathSegment,
  queryString,
  type Served,
  serve,
  watchServedApp,
} from "../../src/fuzz.js";
import { startStores, type TestStores } from "../../src/stack.js";

const KEY = `ik_${randomBytes(16).toString("hex")}`;

let t: TestStores;
let redis: RedisClient;
let served: Served;
// Fixed before the arbitraries are built: an approved bot, a pending one, and an unknown id.
const APPROVED = randomBotId();
const PENDING = randomBotId();
const ids = [APPROVED, APPROVED, PENDING, randomBotId()];

const { logger } = watchServedApp("/health", () => served.port);

beforeAll(async () => {
  t = await startStores();
  redis = t.redis;
  await seedBot(t.db, { id: APPROVED });
  await seedBot(t.db, { id: PENDING, status: "pending" });
  // No delivery queue (deliveries wait for a relay that does not run here) and no DNS: a webhook
  // host is checked by its spelling only, so no generated name is ever looked up.
  const app = createApp({
    db: t.db,
    redis,
    clock: systemClock,
    logger,
    internalApiKey: KEY,
    secretBox: createSecretBox(randomBytes(32)),
    allowPrivateTargets: false,
    webhookResolver: null,
  });
  served = await serve(app);
  console.log(`internal fuzz: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_RUNS}`);
});

afterAll(async () => {
  await served?.close();
  await t?.close();
});

const key = fc.oneof(
  { weight: 6, arbitrary: fc.constant(KEY) },
  { weight: 2, arbitrary: fc.constant(`Bearer ${KEY}`) },
  { weight: 1, arbitrary: fc.constant(`${KEY}x`) },
  { weight: 1, arbitrary: fc.constant(KEY.slice(0, -1)) },
  { weight: 1, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: headerValue(60) },
);
const id = () =>
  fc.oneof(
    fc.constantFrom(...ids),
    fc.stringMatching(/^\d{1,22}$/),
    fc.jsonValue(),
    fc.string({ maxLength: 20 }),
  );
const voteBody = fc.record(
  {
    bot_id: id(),
    user_id: fc.oneof(fc.constant(randomUserId()), fc.stringMatching(/^\d{15,22}$/), fc.jsonValue()),
    extra: fc.jsonValue(),
  },
  { requiredKeys: [] },
);
const createBody = fc.record(
  { id: id(), approve: fc.oneof(fc.boolean(), fc.jsonValue()), approved: fc.boolean() },
  { requiredKeys: [] },
);
const webhookBody = fc.record(
  {
    url: fc.oneof(
      fc.webUrl({ validSchemes: ["https", "http", "ftp"], withQueryParameters: true }),
      fc.constantFrom(
        "https://127.0.0.1/x",
        "https://2130706433/",
        "https://[::ffff:127.0.0.1]/",
        "https://169.254.169.254/latest",
        "https://user:pw@bot.example.com/",
        "https://localhost/",
        "https://bot.example.com/hook",
        `https://bot.example.com/${"a".repeat(3000)}`,
        "javascript:alert(1)",
        "",
      ),
      fc.jsonValue(),
    ),
    secret: fc.string(),
  },
  { requiredKeys: [] },
);
const anyBody = fc.jsonValue({ maxDepth: 3 });

function requests(
  ownMethod: fc.Arbitrary<string> | string,
  path: fc.Arbitrary<string>,
  shaped: fc.Arbitrary<unknown>,
) {
  return fc
    .record({
      method: typeof ownMethod === "string" ? method(ownMethod) : ownMethod,
      path,
      query: queryString(["id", "limit"], ["1"]),
      auth: key,
      contentType,
      body: body(shaped),
      extra: extraHeaders,
      chunked: fc.boolean(),
      slash: fc.constantFrom("", "", "", "/"),
    })
    .map((p) => build({ ...p, path: `${p.path}${p.slash}${p.query}` }));
}

const botPath = (suffix: string) => pathSegment(ids).map((seg) => `/internal/v1/bots/${seg}${suffix}`);

describe(`hostile input on the internal endpoints (seed ${FUZZ_SEED})`, () => {
  it("when POST /internal/v1/votes gets arbitrary requests, then every answer is 201/400/401/404/405/409/413, JSON on error, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("POST", fc.constant("/internal/v1/votes"), voteBody),
      [201, 400, 401, 404, 405, 409, 413],
    );
    expect(seen.get(201)).toBeGreaterThan(0);
    expect(seen.get(401)).toBeGreaterThan(0);
  });

  it("when POST /internal/v1/bots gets arbitrary requests, then every answer is 201/400/401/405/409/413, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("POST", fc.constant("/internal/v1/bots"), createBody),
      [201, 400, 401, 405, 409, 413],
    );
    expect(seen.get(400)).toBeGreaterThan(0);
  });

  it("when GET /internal/v1/bots/{id} gets arbitrary requests, then every answer is 200/400/401/404/405/413, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("GET", botPath(""), anyBody),
      [200, 400, 401, 404, 405, 413],
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when POST /internal/v1/bots/{id}/approve gets arbitrary requests, then every answer is 200/400/401/404/405/413, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("POST", botPath("/approve"), anyBody),
      [200, 400, 401, 404, 405, 413],
      Math.ceil(FUZZ_RUNS / 2),
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when POST /internal/v1/bots/{id}/token gets arbitrary requests, then every answer is 200/400/401/404/405/409/413, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("POST", botPath("/token"), anyBody),
      [200, 400, 401, 404, 405, 409, 413],
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when PUT and DELETE /internal/v1/bots/{id}/webhook get arbitrary requests, then every answer is 200/400/401/404/405/413, never a 5xx", async () => {
    const methods = fc.oneof(
      { weight: 5, arbitrary: fc.constant("PUT") },
      { weight: 2, arbitrary: fc.constant("DELETE") },
      { weight: 1, arbitrary: fc.constantFrom("GET", "POST", "PATCH", "HEAD") },
    );
    const seen = await fuzz(
      served.port,
      requests(methods, botPath("/webhook"), webhookBody),
      [200, 400, 401, 404, 405, 413],
    );
    expect(seen.get(200)).toBeGreaterThan(0);
    expect(seen.get(400)).toBeGreaterThan(0);
  });

  it("when GET /internal/v1/bots/{id}/webhook/deliveries gets arbitrary requests, then every answer is 200/400/401/404/405/413, never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("GET", botPath("/webhook/deliveries"), anyBody),
      [200, 400, 401, 404, 405, 413],
      Math.ceil(FUZZ_RUNS / 2),
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });

  it("when GET /health of vote-ingest gets arbitrary requests, then every answer is 200 (or 404 for another method), never a 5xx", async () => {
    const seen = await fuzz(
      served.port,
      requests("GET", fc.constant("/health"), anyBody),
      [200, 404],
      Math.ceil(FUZZ_RUNS / 2),
    );
    expect(seen.get(200)).toBeGreaterThan(0);
  });
});
