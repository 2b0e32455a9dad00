/**
 * Oversized, deeply nested and compressed-bomb JSON bodies on every endpoint that takes a body:
 * refused with a JSON 4xx, quickly, without the process's memory blowing up.
 */
import { randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { createSecretBox } from "@botdir/db";
import { seedBot } from "@botdir/db/testing";
import { checkAnswer, destroyAgent, type RawRequest, type Served, send, serve } from "../../src/fuzz.js";
import { apiOn, ingestOn } from "../../src/in-process.js";
import { useStores } from "../../src/stack.js";

const KEY = `ik_${randomBytes(16).toString("hex")}`;
const t = useStores();
let api: Served;
let ingest: Served;
let bot: { id: string; token: string };
t.beforeClose(async () => {
  destroyAgent();
  await api?.close();
  await ingest?.close();
});

beforeAll(async () => {
  const seeded = await seedBot(t.db);
  bot = { id: seeded.id, token: seeded.token ?? "" };
  api = await serve(apiOn(t));
  ingest = await serve(
    ingestOn(t, { internalApiKey: KEY, secretBox: createSecretBox(randomBytes(32)), webhookResolver: null }),
  );
});

const DEPTH = 100_000;
const deepArray = (depth = DEPTH) => "[".repeat(depth) + "]".repeat(depth);
const deepObject = () => `${'{"a":'.repeat(DEPTH)}1${"}".repeat(DEPTH)}`;

/**
 * Each endpoint with a body, and a body that wraps a nested value. Its server and credential follow
 * from its path: the API's paths take the bot's token, vote-ingest's the internal key.
 */
const ENDPOINTS: [name: string, wrap: (v: string) => string][] = [
  [
    "PUT /api/v1/bots/{id}/commands",
    (v) => `{"commands":[{"name":"deep","description":"d","options":${v}}]}`,
  ],
  ["POST /api/v1/bots/{id}/stats", (v) => `{"server_count":1,"users":${v}}`],
  ["POST /api/v1/bots/stats", (v) => `{"server_count":${v}}`],
  ["POST /internal/v1/votes", (v) => `{"bot_id":"${bot.id}","user_id":${v}}`],
  ["POST /internal/v1/bots", (v) => `{"id":${v}}`],
  ["PUT /internal/v1/bots/{id}/webhook", (v) => `{"url":${v}}`],
  ["POST /internal/v1/bots/{id}/approve", (v) => `{"x":${v}}`],
];

/** An endpoint of ENDPOINTS by its name: its method, its path for the seeded bot, its server and credential. */
function endpoint(name: string) {
  const [method = "", template = ""] = name.split(" ");
  const onApi = template.startsWith("/api/");
  return {
    method,
    path: template.replace("{id}", bot.id),
    on: onApi ? api : ingest,
    auth: { authorization: onApi ? bot.token : KEY },
  };
}

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
  it.each(ENDPOINTS)(
    "when %s gets a 2 MB body, a 100k-level nested array or object, or a gzip bomb, then each is a JSON 4xx within 2 s",
    async (name, wrap) => {
      const e = endpoint(name);
      const headers = { ...e.auth, "content-type": "application/json" };
      const port = e.on.port;
      const oversized = Buffer.from(wrap(JSON.stringify("x".repeat(2 * 1024 ** 2))));
      const res = await expectRefused(
        { method: e.method, path: e.path, headers, body: oversized },
        port,
        [413],
      );
      expect(JSON.parse(res.body.toString())).toEqual({ error: "The request body is too large." });

      // 100k levels (200 kB): over the small limits, and refused by depth on commands.
      for (const nested of [deepArray(), deepObject()]) {
        const req = { method: e.method, path: e.path, headers, body: Buffer.from(wrap(nested)) };
        await expectRefused(req, port, [400, 413]);
      }
      // 4k levels (8 kB, under every limit): stored fields refuse it (400); a field the endpoint
      // ignores (stats' "users", approve's body) may be accepted. Never a 5xx, always fast.
      const under = { method: e.method, path: e.path, headers, body: Buffer.from(wrap(deepArray(4_000))) };
      await expectRefused(under, port, name.includes("commands") ? [400] : [200, 400, 413], false);
      // 100 MB of JSON whitespace, 100 kB on the wire: the limit applies to the inflated size.
      const bomb = gzipSync(Buffer.concat([Buffer.from(wrap(`"${" ".repeat(100 * 1024 ** 2)}"`))]));
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
