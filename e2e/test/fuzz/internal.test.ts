/**
 * Property-based hostile input against every internal endpoint of vote-ingest (votes and listing
 * management), served in-process on a real socket: only the statuses docs/votes.md and
 * docs/management.md list, the JSON error body, never a 5xx. Seeded: FUZZ_SEED / FUZZ_RUNS.
 */
import { randomBytes } from "node:crypto";
import { createSecretBox } from "@botdir/db";
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import fc from "fast-check";
import {
  endpointRequests,
  FUZZ_RUNS,
  FUZZ_SEED,
  type FuzzCase,
  fuzzEndpoints,
  headerValue,
  method,
  pathSegment,
  queryString,
  useServedApp,
} from "../../src/fuzz.js";
import { ingestOn } from "../../src/in-process.js";

const KEY = `ik_${randomBytes(16).toString("hex")}`;

// Fixed before the arbitraries are built: an approved bot, a pending one, and an unknown id.
const APPROVED = randomBotId();
const PENDING = randomBotId();
const ids = [APPROVED, APPROVED, PENDING, randomBotId()];

const served = useServedApp("internal fuzz", "/health", async (t, logger) => {
  await seedBot(t.db, { id: APPROVED });
  await seedBot(t.db, { id: PENDING, status: "pending" });
  // No delivery queue (deliveries wait for a relay that does not run here) and no DNS: a webhook
  // host is checked by its spelling only, so no generated name is ever looked up.
  return ingestOn(t, {
    logger,
    internalApiKey: KEY,
    secretBox: createSecretBox(randomBytes(32)),
    allowPrivateTargets: false,
    webhookResolver: null,
  });
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
  return endpointRequests({
    method: typeof ownMethod === "string" ? method(ownMethod) : ownMethod,
    path,
    query: queryString(["id", "limit"], ["1"]),
    auth: key,
    shaped,
  });
}

const botPath = (suffix: string) => pathSegment(ids).map((seg) => `/internal/v1/bots/${seg}${suffix}`);

/** An endpoint under /internal/v1/bots/{id} that reads no body (any JSON is sent anyway); a 200 must be seen. */
function bodylessBotEndpoint(
  ownMethod: string,
  suffix: string,
  allowed: number[],
  runs = FUZZ_RUNS,
): FuzzCase {
  return {
    title: `when ${ownMethod} /internal/v1/bots/{id}${suffix} gets arbitrary requests, then every answer is ${allowed.join("/")}, never a 5xx`,
    requests: () => requests(ownMethod, botPath(suffix), anyBody),
    allowed,
    runs,
    answered: [200],
  };
}

describe(`hostile input on the internal endpoints (seed ${FUZZ_SEED})`, () => {
  fuzzEndpoints(
    () => served.port,
    [
      {
        title:
          "when POST /internal/v1/votes gets arbitrary requests, then every answer is 201/400/401/404/405/409/413, JSON on error, never a 5xx",
        requests: () => requests("POST", fc.constant("/internal/v1/votes"), voteBody),
        allowed: [201, 400, 401, 404, 405, 409, 413],
        answered: [201, 401],
      },
      {
        title:
          "when POST /internal/v1/bots gets arbitrary requests, then every answer is 201/400/401/405/409/413, never a 5xx",
        requests: () => requests("POST", fc.constant("/internal/v1/bots"), createBody),
        allowed: [201, 400, 401, 405, 409, 413],
        answered: [400],
      },
      bodylessBotEndpoint("GET", "", [200, 400, 401, 404, 405, 413]),
      bodylessBotEndpoint("POST", "/approve", [200, 400, 401, 404, 405, 413], Math.ceil(FUZZ_RUNS / 2)),
      bodylessBotEndpoint("POST", "/token", [200, 400, 401, 404, 405, 409, 413]),
      {
        title:
          "when PUT and DELETE /internal/v1/bots/{id}/webhook get arbitrary requests, then every answer is 200/400/401/404/405/413, never a 5xx",
        requests: () => {
          const methods = fc.oneof(
            { weight: 5, arbitrary: fc.constant("PUT") },
            { weight: 2, arbitrary: fc.constant("DELETE") },
            { weight: 1, arbitrary: fc.constantFrom("GET", "POST", "PATCH", "HEAD") },
          );
          return requests(methods, botPath("/webhook"), webhookBody);
        },
        allowed: [200, 400, 401, 404, 405, 413],
        answered: [200, 400],
      },
      bodylessBotEndpoint(
        "GET",
        "/webhook/deliveries",
        [200, 400, 401, 404, 405, 413],
        Math.ceil(FUZZ_RUNS / 2),
      ),
      {
        title:
          "when GET /health of vote-ingest gets arbitrary requests, then every answer is 200 (or 404 for another method), never a 5xx",
        requests: () => requests("GET", fc.constant("/health"), anyBody),
        allowed: [200, 404],
        runs: Math.ceil(FUZZ_RUNS / 2),
        answered: [200],
      },
    ],
  );
});
