import { randomBytes, randomUUID } from "node:crypto";
import { createSecretBox, hashToken } from "@botdir/db";
import { randomBotId, seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import type { Resolver } from "@botdir/webhook-targets";
import type { Express } from "express";
import request from "supertest";
import type { IngestDeps } from "../src/deps.js";
import { expectedList, seedDeliveries, TWELVE_ATTEMPTS } from "./support/attempts.js";
import { useIngestApp } from "./support/votes.js";

const KEY = `internal-${randomBytes(16).toString("hex")}`;
const box = createSecretBox(randomBytes(32));
const logLines: unknown[] = [];
const capturingLogger = {
  info: (obj: object, msg?: string) => void logLines.push([obj, msg]),
  warn: (obj: object, msg?: string) => void logLines.push([obj, msg]),
  error: (obj: object, msg?: string) => void logLines.push([obj, msg]),
};
/** DNS answers for the webhook host check; any other name does not resolve. */
const resolver: Resolver = async (host) => {
  const answers: Record<string, string[]> = {
    "hooks.example.com": ["93.184.216.34"],
    "rebind.example.com": ["93.184.216.34", "10.0.0.7"],
    "metadata.example.com": ["169.254.169.254"],
  };
  const found = answers[host];
  if (!found) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
  return found;
};

const clock = new ManualClock(new Date("2026-11-21T05:00:00.000Z"));
const t = useIngestApp({
  clock,
  logger: capturingLogger,
  internalApiKey: KEY,
  secretBox: box,
  webhookResolver: resolver,
});
let app: Express;

beforeAll(() => {
  app = t.app();
});

/** `method path` on the management API with the internal key, on `on` (the file's app by default). */
function internal(method: "get" | "post" | "put" | "delete" | "patch", path: string, on: Express = app) {
  return request(on)[method](path).set("Authorization", KEY);
}

const botRow = (id: string) => t.db.prisma.bot.findUniqueOrThrow({ where: { id } });
const BAD_ID_PARAM = "The bot id must be a bot application id (17 to 19 digits).";

/**
 * The two refusals every per-bot endpoint shares: an unknown bot is 404 Bot not found., and
 * `badId` (not an application id) is 400 naming the parameter. `send` makes the request for an id.
 */
function itRefusesUnknownAndBadIds(
  send: (id: string) => PromiseLike<request.Response>,
  badId: string,
  unknownTitle = "when the bot does not exist, then 404",
) {
  it(unknownTitle, async () => {
    const res = await send(randomBotId());
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "Bot not found." });
  });

  it("when the id is not an application id, then 400 naming it", async () => {
    const res = await send(badId);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: BAD_ID_PARAM });
  });
}

describe("internal key", () => {
  const someId = randomBotId();
  const endpoints: Array<[string, string]> = [
    ["post", "/internal/v1/bots"],
    ["get", `/internal/v1/bots/${someId}`],
    ["post", `/internal/v1/bots/${someId}/approve`],
    ["post", `/internal/v1/bots/${someId}/token`],
    ["put", `/internal/v1/bots/${someId}/webhook`],
    ["delete", `/internal/v1/bots/${someId}/webhook`],
    ["get", `/internal/v1/bots/${someId}/webhook/deliveries`],
    ["post", `/internal/v1/bots/${someId}/webhook/deliveries/${randomUUID()}/redeliver`],
  ];

  it.each(endpoints)(
    "when %s %s has no Authorization, then 401 with the error body",
    async (method, path) => {
      const res = await request(app)
        [method as "post"](path)
        .send({ id: someId, url: "https://hooks.example.com/x" });
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "Invalid internal API key." });
    },
  );

  it("when the key is wrong, then 401 and nothing is created", async () => {
    const id = randomBotId();
    const res = await request(app).post("/internal/v1/bots").set("Authorization", `${KEY}x`).send({ id });
    expect(res.status).toBe(401);
    expect(await t.db.prisma.bot.findUnique({ where: { id } })).toBeNull();
  });

  it("when the key is sent as Bearer, then it is accepted", async () => {
    const id = randomBotId();
    const res = await request(app)
      .post("/internal/v1/bots")
      .set("Authorization", `Bearer ${KEY}`)
      .send({ id });
    expect(res.status).toBe(201);
  });
});

describe("POST /internal/v1/bots", () => {
  it("when a new id is submitted, then 201 and the bot is pending without a token", async () => {
    const id = randomBotId();
    const res = await internal("post", "/internal/v1/bots").send({ id });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ id, status: "pending" });
    const row = await botRow(id);
    expect(row.status).toBe("pending");
    expect(row.tokenHash).toBeNull();
    expect(row.approvedAt).toBeNull();
  });

  it("when approve is true, then the bot is approved at once", async () => {
    const id = randomBotId();
    const res = await internal("post", "/internal/v1/bots").send({ id, approve: true });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ id, status: "approved" });
    expect((await botRow(id)).approvedAt?.toISOString()).toBe("2026-11-21T05:00:00.000Z");
  });

  it("when the id already exists, then 409 and the bot is unchanged", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    const res = await internal("post", "/internal/v1/bots").send({ id, approve: true });
    expect(res.status).toBe(409);
    expect(res.headers["x-botdir-conflict"]).toBe("bot_exists");
    expect(res.body).toEqual({ error: "A bot with this id already exists." });
    expect((await botRow(id)).status).toBe("pending");
  });

  it.each([
    [{ id: "12345" }, "id must be a bot application id (17 to 19 digits)."],
    [{}, "id is required."],
    [{ id: randomBotId(), approved: true }, "The body has an unknown field: approved."],
    [{ id: randomBotId(), approve: "yes" }, "approve must be a boolean."],
  ])("when the body is %j, then 400 naming the problem", async (body, sentence) => {
    const res = await internal("post", "/internal/v1/bots").send(body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: sentence });
  });

  it("when the JSON does not parse, then 400 Invalid JSON body.", async () => {
    const res = await internal("post", "/internal/v1/bots")
      .set("Content-Type", "application/json")
      .send('{"id": ');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "Invalid JSON body." });
  });
});

describe("POST /internal/v1/bots/:id/approve", () => {
  it("when the bot is pending, then it becomes approved", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    const res = await internal("post", `/internal/v1/bots/${id}/approve`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id, status: "approved" });
    expect((await botRow(id)).status).toBe("approved");
  });

  it("when the bot is already approved, then 200 and its approval time is kept", async () => {
    const { id } = await seedBot(t.db);
    const before = (await botRow(id)).approvedAt;
    const res = await internal("post", `/internal/v1/bots/${id}/approve`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id, status: "approved" });
    expect((await botRow(id)).approvedAt).toEqual(before);
  });

  itRefusesUnknownAndBadIds(
    (id) => internal("post", `/internal/v1/bots/${id}/approve`),
    "abc",
    "when the bot does not exist, then 404 Bot not found.",
  );
});

describe("POST /internal/v1/bots/:id/token", () => {
  it("when the bot is approved, then a 256-bit token is shown once and only its hash is stored", async () => {
    const { id } = await seedBot(t.db, { withToken: false });
    const res = await internal("post", `/internal/v1/bots/${id}/token`);
    expect(res.status).toBe(200);
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(Object.keys(res.body).sort()).toEqual(["id", "token"]);
    expect(res.body.id).toBe(id);
    expect(Buffer.from(res.body.token, "base64url")).toHaveLength(32);
    const row = await botRow(id);
    expect(row.tokenHash).toBe(hashToken(res.body.token));
    expect(JSON.stringify(row, (_k, v) => (typeof v === "bigint" ? String(v) : v))).not.toContain(
      res.body.token,
    );

    const shown = await internal("get", `/internal/v1/bots/${id}`);
    expect(shown.body.has_token).toBe(true);
    expect(JSON.stringify(shown.body)).not.toContain(res.body.token);
  });

  it("when the token is rotated, then the stored hash is the new token's and the old hash is gone", async () => {
    const { id, token: oldToken } = await seedBot(t.db);
    const res = await internal("post", `/internal/v1/bots/${id}/token`);
    expect(res.status).toBe(200);
    const newToken: string = res.body.token;
    expect(newToken).not.toBe(oldToken);
    expect((await botRow(id)).tokenHash).toBe(hashToken(newToken));
    // What the API does on every request: look the bot up by the presented token's hash.
    expect(await t.db.prisma.bot.findUnique({ where: { tokenHash: hashToken(oldToken!) } })).toBeNull();
    expect((await t.db.prisma.bot.findUnique({ where: { tokenHash: hashToken(newToken) } }))?.id).toBe(id);
  });

  it("when the bot is pending, then 409 and no token is stored", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    const res = await internal("post", `/internal/v1/bots/${id}/token`);
    expect(res.status).toBe(409);
    expect(res.headers["x-botdir-conflict"]).toBe("not_approved");
    expect(res.body).toEqual({ error: "The bot is not approved yet; only approved bots get a token." });
    expect((await botRow(id)).tokenHash).toBeNull();
  });

  itRefusesUnknownAndBadIds(
    (id) => internal("post", `/internal/v1/bots/${id}/token`),
    "1234567890123456789012",
  );
});

describe("PUT /internal/v1/bots/:id/webhook", () => {
  const put = (id: string, body: unknown, on: Express = app) =>
    internal("put", `/internal/v1/bots/${id}/webhook`, on).send(body as object);
  /** A new approved bot, and the answer to PUT `body` as its webhook (on an app built with `deps`, if given). */
  async function putOnNewBot(body: unknown, deps?: Partial<IngestDeps>) {
    const { id } = await seedBot(t.db);
    return { id, res: await put(id, body, deps ? t.app(deps) : app) };
  }

  it("when the URL is public https, then it is stored with a new secret shown once and kept encrypted", async () => {
    const { id, res } = await putOnNewBot({ url: "https://hooks.example.com/votes" });
    expect(res.status).toBe(200);
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(res.body).toEqual({ id, url: "https://hooks.example.com/votes", secret: expect.any(String) });
    expect(res.body.secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    const row = await botRow(id);
    expect(row.webhookUrl).toBe("https://hooks.example.com/votes");
    expect(row.webhookSecretEncrypted).not.toBeNull();
    expect(row.webhookSecretEncrypted).not.toContain(res.body.secret);
    expect(row.webhookSecretEncrypted).not.toContain(res.body.secret.slice(6));
    expect(box.decrypt(row.webhookSecretEncrypted!)).toBe(res.body.secret);

    const shown = await internal("get", `/internal/v1/bots/${id}`);
    expect(shown.body.webhook_url).toBe("https://hooks.example.com/votes");
    expect(JSON.stringify(shown.body)).not.toContain(res.body.secret);
  });

  it("when the same URL is set again, then the secret changes every time", async () => {
    const { id } = await seedBot(t.db);
    const secrets: string[] = [];
    const stored: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await put(id, { url: "https://hooks.example.com/votes" });
      expect(res.status).toBe(200);
      secrets.push(res.body.secret);
      const row = await botRow(id);
      stored.push(row.webhookSecretEncrypted!);
      expect(box.decrypt(row.webhookSecretEncrypted!)).toBe(res.body.secret);
    }
    expect(new Set(secrets).size).toBe(3);
    expect(new Set(stored).size).toBe(3);
  });

  it.each([
    ["http://hooks.example.com/x", "The webhook URL must use https."],
    ["https://127.0.0.1/x", "loopback"],
    ["https://2130706433/x", "loopback"],
    ["https://0177.0.0.1/x", "loopback"],
    ["https://0x7f.0.0.1/x", "loopback"],
    ["https://0x7f000001/x", "loopback"],
    ["https://127.1/x", "loopback"],
    ["https://[::1]/x", "loopback"],
    ["https://[::ffff:127.0.0.1]/x", "loopback"],
    ["https://[::ffff:7f00:1]/x", "loopback"],
    ["https://[::ffff:10.0.0.1]/x", "private"],
    ["https://10.0.0.5/x", "private"],
    ["https://172.16.3.4/x", "private"],
    ["https://192.168.1.10/x", "private"],
    ["https://[fd00::1]/x", "private"],
    ["https://[fe80::1]/x", "link-local"],
    ["https://169.254.169.254/latest/meta-data", "link-local"],
    ["https://100.64.0.1/x", "carrier-grade NAT"],
    ["https://0.0.0.0/x", "unspecified"],
    ["https://localhost/x", "The webhook URL must name a public host."],
    ["https://LOCALHOST./x", "The webhook URL must name a public host."],
    ["https://api.localhost/x", "The webhook URL must name a public host."],
    ["https://intranet/x", "The webhook URL must name a public host."],
    ["https://rebind.example.com/x", "private"],
    ["https://metadata.example.com/x", "link-local"],
    ["https://user:pw@hooks.example.com/x", "The webhook URL must not contain credentials."],
    ["not a url", "The webhook URL is not a valid URL."],
    ["ftp://hooks.example.com/x", "The webhook URL must use https."],
  ])("when the URL is %s, then 400 with one sentence and nothing changes", async (url, words) => {
    const { id, res } = await putOnNewBot({ url });
    expect(res.status).toBe(400);
    expect(Object.keys(res.body)).toEqual(["error"]);
    expect(res.body.error).toContain(words);
    expect(res.body.error).toMatch(/^The webhook URL .*\.$/);
    const row = await botRow(id);
    expect(row.webhookUrl).toBeNull();
    expect(row.webhookSecretEncrypted).toBeNull();
  });

  it("when a URL was set and a refused one is sent, then the old URL and secret stay", async () => {
    const { id } = await seedBot(t.db);
    const first = await put(id, { url: "https://hooks.example.com/a" });
    const before = await botRow(id);
    const res = await put(id, { url: "https://[::1]/a" });
    expect(res.status).toBe(400);
    const after = await botRow(id);
    expect(after.webhookUrl).toBe("https://hooks.example.com/a");
    expect(after.webhookSecretEncrypted).toBe(before.webhookSecretEncrypted);
    expect(box.decrypt(after.webhookSecretEncrypted!)).toBe(first.body.secret);
  });

  it("when private targets are allowed (development), then http to loopback is accepted", async () => {
    const { res } = await putOnNewBot({ url: "http://127.0.0.1:8080/hook" }, { allowPrivateTargets: true });
    expect(res.status).toBe(200);
    expect(res.body.url).toBe("http://127.0.0.1:8080/hook");
  });

  it("when the webhook host's nameserver never answers, then the URL is saved once the DNS deadline passes (checked again at connect time)", async () => {
    const slowApp = t.app({ webhookResolver: () => new Promise(() => {}), webhookDnsTimeoutMs: 200 });
    const { id } = await seedBot(t.db);
    const started = Date.now();
    const res = await put(id, { url: "https://slow-dns.example.com/hook" }, slowApp);
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it.each([
    [{}, "url is required."],
    [{ url: 42 }, "url must be a string."],
    [{ url: "https://hooks.example.com/x", secret: "mine" }, "The body has an unknown field: secret."],
  ])("when the body is %j, then 400 naming the problem", async (body, sentence) => {
    const { res } = await putOnNewBot(body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: sentence });
  });

  itRefusesUnknownAndBadIds((id) => put(id, { url: "https://hooks.example.com/x" }), "bot-one");

  it("when no encryption key is configured, then 503 and nothing is stored", async () => {
    const { id, res } = await putOnNewBot({ url: "https://hooks.example.com/x" }, { secretBox: null });
    expect(res.status).toBe(503);
    expect(res.body.error).toContain("SECRET_ENCRYPTION_KEY");
    expect((await botRow(id)).webhookUrl).toBeNull();
  });
});

describe("DELETE /internal/v1/bots/:id/webhook", () => {
  it("when a webhook is set, then URL and secret are removed", async () => {
    const { id } = await seedBot(t.db);
    await internal("put", `/internal/v1/bots/${id}/webhook`).send({ url: "https://hooks.example.com/x" });
    const res = await internal("delete", `/internal/v1/bots/${id}/webhook`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id, url: null });
    const row = await botRow(id);
    expect(row.webhookUrl).toBeNull();
    expect(row.webhookSecretEncrypted).toBeNull();
  });

  it("when no webhook is set, then 200 all the same", async () => {
    const { id } = await seedBot(t.db);
    const res = await internal("delete", `/internal/v1/bots/${id}/webhook`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id, url: null });
  });

  it("when the bot has pending deliveries, then clearing keeps them and their attempts", async () => {
    const { id } = await seedBot(t.db);
    await seedDeliveries(t.db, id, new Date("2026-11-20T00:00:00.000Z"), [
      { state: "pending", attempts: [{ statusCode: 500, errorKind: "http_status", at: 0 }] },
    ]);
    const res = await internal("delete", `/internal/v1/bots/${id}/webhook`);
    expect(res.status).toBe(200);
    expect(await t.db.prisma.delivery.count({ where: { botId: id, state: "pending" } })).toBe(1);
    const list = await internal("get", `/internal/v1/bots/${id}/webhook/deliveries`);
    expect(list.body.attempts).toHaveLength(1);
  });

  itRefusesUnknownAndBadIds((id) => internal("delete", `/internal/v1/bots/${id}/webhook`), "x");
});

describe("GET /internal/v1/bots/:id/webhook/deliveries", () => {
  it("when there are twelve attempts, then the ten newest are listed newest first, each with its own outcome beside its delivery's state", async () => {
    const { id } = await seedBot(t.db);
    const other = await seedBot(t.db);
    const base = new Date("2026-11-20T10:00:00.000Z");
    const seeded = await seedDeliveries(t.db, id, base, TWELVE_ATTEMPTS);
    // A newer attempt of another bot must not appear.
    await seedDeliveries(t.db, other.id, base, [
      { state: "delivered", attempts: [{ statusCode: 200, errorKind: null, at: 60 }] },
    ]);

    const res = await internal("get", `/internal/v1/bots/${id}/webhook/deliveries`);

    expect(res.status).toBe(200);
    const attempts = res.body.attempts as Array<Record<string, unknown>>;
    expect(attempts).toHaveLength(10);
    expect(attempts).toEqual(expectedList(seeded));
    expect(attempts[0]).toMatchObject({
      attempt: 1,
      statusCode: 200,
      errorKind: null,
      outcome: "delivered",
      deliveryState: "delivered",
      event: "vote.available",
    });
    expect(attempts[0]?.attemptedAt).toBe("2026-11-20T10:11:00.000Z");
    expect(attempts[1]).toMatchObject({
      attempt: 4,
      statusCode: 503,
      outcome: "failed",
      deliveryState: "pending",
      event: "vote.create",
    });
    // The failed first attempt of a delivery that a retry delivered is listed as failed.
    expect(attempts[5]).toMatchObject({ attempt: 2, statusCode: 204, outcome: "delivered" });
    expect(attempts[6]).toMatchObject({
      attempt: 1,
      errorKind: "connection",
      outcome: "failed",
      deliveryState: "delivered",
    });
    expect(attempts[6]).toMatchObject({ attempt: 1, statusCode: null, errorKind: "connection" });
    expect(attempts[7]).toMatchObject({
      attempt: 5,
      statusCode: 500,
      outcome: "failed",
      deliveryState: "failed",
    });
    expect(attempts[9]).toMatchObject({
      attempt: 3,
      statusCode: null,
      errorKind: "timeout",
      outcome: "failed",
    });
    const times = attempts.map((a) => a.attemptedAt as string);
    expect([...times].sort().reverse()).toEqual(times);
  });

  it("when the bot has no attempts, then an empty list", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    const res = await internal("get", `/internal/v1/bots/${id}/webhook/deliveries`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ attempts: [] });
  });

  itRefusesUnknownAndBadIds((id) => internal("get", `/internal/v1/bots/${id}/webhook/deliveries`), "12");
});

describe("GET /internal/v1/bots/:id", () => {
  /** The listing as GET shows it: 200, with no token, hash or secret anywhere in the body. */
  async function shownListing(id: string) {
    const res = await internal("get", `/internal/v1/bots/${id}`);
    expect(res.status).toBe(200);
    expect(JSON.stringify(res.body)).not.toMatch(/whsec_|secret|token_hash|tokenHash/);
    return res.body;
  }

  it("when the bot has data, then the listing is shown without token or secret", async () => {
    const { id } = await seedBot(t.db, { serverCount: 1482 });
    const commands = [{ name: "ping", description: "Replies with pong." }];
    await t.db.prisma.bot.update({
      where: { id },
      data: { commands, checkedInAt: new Date("2026-11-21T04:59:00.123Z") },
    });
    await internal("put", `/internal/v1/bots/${id}/webhook`).send({ url: "https://hooks.example.com/v" });

    expect(await shownListing(id)).toMatchObject({
      id,
      status: "approved",
      approved: true,
      commands,
      server_count: 1482,
      checked_in_at: "2026-11-21T04:59:00.123Z",
      webhook_url: "https://hooks.example.com/v",
      has_token: true,
    });
  });

  it("when the bot is pending and new, then nulls and no token", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    expect(await shownListing(id)).toMatchObject({
      id,
      status: "pending",
      approved: false,
      approved_at: null,
      commands: [],
      server_count: null,
      checked_in_at: null,
      webhook_url: null,
      has_token: false,
      token_created_at: null,
    });
  });

  itRefusesUnknownAndBadIds((id) => internal("get", `/internal/v1/bots/${id}`), "%20");

  it("when another method is used on a known path, then 405 with the error body", async () => {
    const res = await internal("patch", `/internal/v1/bots/${randomBotId()}`);
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe("GET");
    expect(res.body).toEqual({ error: "Method not allowed on this endpoint." });
  });
});

describe("logging", () => {
  it("never logs tokens, webhook secrets or the internal key", async () => {
    const { id } = await seedBot(t.db);
    const token = await internal("post", `/internal/v1/bots/${id}/token`);
    const hook = await internal("put", `/internal/v1/bots/${id}/webhook`).send({
      url: "https://hooks.example.com/log",
    });
    expect(token.status).toBe(200);
    expect(hook.status).toBe(200);
    expect(logLines.length).toBeGreaterThan(0);
    const logged = JSON.stringify(logLines);
    expect(logged).not.toContain(token.body.token);
    expect(logged).not.toContain(hook.body.secret);
    expect(logged).not.toContain(KEY);
  });
});
