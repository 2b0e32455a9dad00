/**
 * Secrets: API tokens are only ever handled as SHA-256 hashes (nothing stores or queries the raw
 * token), no token, webhook secret or Authorization value reaches a log line of any of the three
 * apps, and tokens and secrets come from a CSPRNG with 256 bits.
 */
import { createHash, randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { createSecretBox, generateToken, generateWebhookSecret } from "@botdir/db";
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import { createRedis, systemClock } from "@botdir/service-kit";
import { pino } from "pino";
import { createDeliveryQueue } from "../../../apps/vote-ingest/src/outbox/queue.js";
import { createOutboxRelay } from "../../../apps/vote-ingest/src/outbox/relay.js";
import { createHttpApp as createDispatcherHttp } from "../../../apps/webhook-dispatcher/src/app.js";
import { createDispatcherWorker } from "../../../apps/webhook-dispatcher/src/worker.js";
import { destroyAgent, type RawRequest, send, serve } from "../../src/fuzz.js";
import { apiOn, ingestOn } from "../../src/in-process.js";
import { freePort, waitFor } from "../../src/processes.js";
import { type Receiver, startReceiver } from "../../src/receivers.js";
import { connectSharedRedis, deliveriesOf, useStores } from "../../src/stack.js";

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

const t = useStores();
t.beforeClose(destroyAgent);

async function served(app: Parameters<typeof serve>[0]) {
  const s = await serve(app);
  t.beforeClose(() => s.close());
  return s;
}

const req = (
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: unknown,
): RawRequest => ({
  method,
  path,
  headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
  ...(body === undefined ? {} : { body: Buffer.from(JSON.stringify(body)) }),
});

describe("API tokens are handled as hashes only", () => {
  it("when every authenticated endpoint is called with a token, then no SQL text or parameter carries the raw token, the lookups use its SHA-256, and the database holds only the hash", async () => {
    const bot = await seedBot(t.db);
    const token = bot.token ?? "";
    const queries: string[] = [];
    const Client = (
      t.db.pool as unknown as { Client: { prototype: { query: (...args: unknown[]) => unknown } } }
    ).Client;
    const original = Client.prototype.query;
    Client.prototype.query = function (this: unknown, ...args: unknown[]) {
      queries.push(
        JSON.stringify(args, (_k, v) =>
          typeof v === "function" ? undefined : typeof v === "bigint" ? String(v) : v,
        ),
      );
      return original.apply(this, args);
    };
    try {
      const api = await served(apiOn(t));
      const auths = [token, `Bearer ${token}`, `Bot ${token}`];
      for (const authorization of auths) {
        const h = { authorization };
        const answers = await Promise.all([
          send(
            api.port,
            req("PUT", `/api/v1/bots/${bot.id}/commands`, h, {
              commands: [{ name: "ping", description: "Pong." }],
            }),
          ),
          send(api.port, req("POST", `/api/v1/bots/${bot.id}/stats`, h, { server_count: 3 })),
          send(api.port, req("POST", "/api/v1/bots/stats", h, { server_count: "bad" })),
          send(api.port, req("GET", `/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, h)),
          send(api.port, req("GET", `/api/v1/bots/${randomBotId()}/votes`, h)),
          send(api.port, req("GET", "/api/v1/bots/votes", h)),
        ]);
        expect(answers.map((a) => a.status)).toEqual([200, 200, 400, 200, 404, 200]);
      }
    } finally {
      Client.prototype.query = original;
    }
    expect(queries.length).toBeGreaterThan(10);
    expect(queries.filter((q) => q.includes(token))).toEqual([]);
    expect(queries.some((q) => q.includes(sha256(token)))).toBe(true);

    const { rows } = await t.db.pool.query<{ row: string; token_hash: string }>(
      "SELECT to_jsonb(b)::text AS row, token_hash FROM bots b WHERE id = $1",
      [bot.id],
    );
    expect(rows[0]!.row.includes(token)).toBe(false);
    expect(rows[0]!.token_hash).toBe(sha256(token));
  });
});

describe("no secret in any log line", () => {
  it("when tokens, webhook secrets, the internal key and bad Authorization values go through all three apps, then none of them (nor the token's hash) appears in any log line", async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(...chunk.toString().split("\n").filter(Boolean));
        done();
      },
    });
    const logger = pino({ level: "trace" }, sink);
    const internalKey = `ik_${randomBytes(16).toString("hex")}`;
    const secretBox = createSecretBox(randomBytes(32));
    // Hash-tagged, as QUEUE_PREFIX must be: BullMQ's scripts touch several keys (one slot on a Cluster).
    const prefix = `{${t.prefix}bull}`;

    // vote-ingest (HTTP, hand-off, relay), the dispatcher (worker and listener), the API, and an
    // API whose Redis is down (the limiter's local-count warnings).
    const queue = createDeliveryQueue({ db: t.db, redis: t.redis, prefix, logger });
    t.beforeClose(async () => {
      await queue.queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
    });
    const relay = createOutboxRelay({
      db: t.db,
      queue,
      clock: systemClock,
      logger,
      intervalMs: 100,
      staleMs: 1_000,
    });
    relay.start();
    t.beforeClose(() => relay.stop());
    const ingest = await served(
      ingestOn(t, {
        logger,
        internalApiKey: internalKey,
        deliveryQueue: queue,
        secretBox,
        allowPrivateTargets: true,
        webhookResolver: null,
      }),
    );
    const workerRedis = await connectSharedRedis("worker");
    t.beforeClose(() => workerRedis.disconnect());
    const worker = createDispatcherWorker(
      { db: t.db, redis: workerRedis, secrets: secretBox, clock: systemClock, logger },
      {
        queuePrefix: prefix,
        concurrency: 2,
        timeoutMs: 1_000,
        retryDelays: [50, 50, 50, 50],
        allowPrivateTargets: true,
        lockDurationMs: 2_000,
        stalledIntervalMs: 1_000,
      },
    );
    t.beforeClose(() => worker.close());
    const dispatcherHttp = await served(createDispatcherHttp({ db: t.db, redis: workerRedis, logger }));
    const api = await served(apiOn(t, { logger }));
    const deadRedis = createRedis({ url: `redis://127.0.0.1:${await freePort()}` }, "fail-fast");
    t.beforeClose(() => deadRedis.disconnect());
    const degradedApi = await served(apiOn(t, { logger, redis: deadRedis }));
    // The receiver refuses the first attempt (a logged failure), then accepts.
    const receiver: Receiver = await startReceiver((_r, n) => (n === 1 ? { status: 500 } : { status: 204 }));
    t.beforeClose(() => receiver.close());

    const k = { authorization: internalKey };
    const botId = randomBotId();
    expect(
      (await send(ingest.port, req("POST", "/internal/v1/bots", k, { id: botId, approve: true }))).status,
    ).toBe(201);
    const tokenRes = await send(
      ingest.port,
      req("POST", `/internal/v1/bots/${botId}/token`, { authorization: `Bearer ${internalKey}` }),
    );
    const token = JSON.parse(tokenRes.body.toString()).token as string;
    const hookRes = await send(
      ingest.port,
      req("PUT", `/internal/v1/bots/${botId}/webhook`, k, { url: receiver.url("/hook") }),
    );
    const secret = JSON.parse(hookRes.body.toString()).secret as string;
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    const wrongKey = `wrong_${randomBytes(12).toString("hex")}`;
    const badToken = `bad_${randomBytes(12).toString("hex")}`;

    const auths = [token, `Bearer ${token}`, `bot ${token}`, badToken, `Bearer ${badToken}`, secret];
    for (const authorization of auths) {
      for (const target of [api, degradedApi]) {
        await send(
          target.port,
          req("POST", `/api/v1/bots/${botId}/stats`, { authorization }, { server_count: 1 }),
        );
        await send(
          target.port,
          req("PUT", `/api/v1/bots/${botId}/commands`, { authorization }, { commands: "nope" }),
        );
        await send(
          target.port,
          req("GET", `/api/v1/bots/${botId}/check?userId=${randomUserId()}`, { authorization }),
        );
        await send(target.port, req("GET", `/api/v1/bots/${randomBotId()}/votes`, { authorization }));
        await send(target.port, req("DELETE", `/api/v1/bots/${botId}/stats`, { authorization }));
      }
    }
    for (const authorization of [wrongKey, `Bearer ${wrongKey}`, token, secret]) {
      expect(
        (
          await send(
            ingest.port,
            req("POST", "/internal/v1/votes", { authorization }, { bot_id: botId, user_id: randomUserId() }),
          )
        ).status,
      ).toBe(401);
      expect(
        (await send(ingest.port, req("GET", `/internal/v1/bots/${botId}`, { authorization }))).status,
      ).toBe(401);
    }
    expect(
      (
        await send(
          ingest.port,
          req("POST", "/internal/v1/votes", k, { bot_id: botId, user_id: randomUserId() }),
        )
      ).status,
    ).toBe(201);
    expect(
      (await send(ingest.port, req("GET", `/internal/v1/bots/${botId}/webhook/deliveries`, k))).status,
    ).toBe(200);
    expect((await send(dispatcherHttp.port, req("GET", "/health", { authorization: secret }))).status).toBe(
      200,
    );
    await waitFor(
      async () => (await deliveriesOf(t.db, botId))[0]?.state === "delivered",
      "the webhook delivery",
      20_000,
    );

    // The webhook really carried the secret, and the apps really logged (requests, the failed and
    // the successful attempt, the limiter's local-count warnings while Redis is away).
    expect(receiver.requests.map((r) => r.headers.authorization)).toEqual([secret, secret]);
    const text = lines.join("\n");
    expect(text).toContain("webhook attempt failed");
    expect(text).toContain("webhook delivered");
    expect(text).toContain("rate_limit_local_fallback");
    expect(lines.length).toBeGreaterThan(50);

    const stored = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: botId } });
    const forbidden = {
      token,
      tokenHash: sha256(token),
      secret,
      encryptedSecret: stored.webhookSecretEncrypted ?? "<none>",
      internalKey,
      wrongKey,
      badToken,
    };
    for (const [name, value] of Object.entries(forbidden)) {
      expect({ name, lines: lines.filter((l) => l.includes(value)) }).toEqual({ name, lines: [] });
    }
  });
});

describe("tokens and secrets come from a CSPRNG with 256 bits", () => {
  const N = 20_000;

  it("when 20 000 tokens and secrets are drawn, then all are unique, carry 32 random bytes each, and their bits and bytes are uniformly distributed", () => {
    const tokens = Array.from({ length: N }, generateToken);
    const secrets = Array.from({ length: N }, generateWebhookSecret);
    expect(new Set(tokens).size).toBe(N);
    expect(new Set(secrets).size).toBe(N);
    for (const tk of tokens.slice(0, 100)) expect(tk).toMatch(/^[A-Za-z0-9_-]{43}$/);
    for (const s of secrets.slice(0, 100)) expect(s).toMatch(/^whsec_[0-9a-f]{64}$/);

    for (const raw of [
      tokens.map((x) => Buffer.from(x, "base64url")),
      secrets.map((x) => Buffer.from(x.slice(6), "hex")),
    ]) {
      expect(raw.every((b) => b.length === 32)).toBe(true); // 256 bits ≥ 128
      const bytes = Buffer.concat(raw);
      const counts = new Array<number>(256).fill(0);
      let ones = 0;
      for (const byte of bytes) {
        counts[byte]!++;
        for (let v = byte; v; v >>= 1) ones += v & 1;
      }
      const bits = bytes.length * 8;
      // Bit balance: 5.12 M bits, standard deviation ~0.02 %; 0.2 % is 10 sigma.
      expect(Math.abs(ones / bits - 0.5)).toBeLessThan(0.002);
      // Byte frequencies: chi-square with 255 degrees of freedom (mean 255, sd ~22.6).
      const expected = bytes.length / 256;
      const chi = counts.reduce((sum, c) => sum + (c - expected) ** 2 / expected, 0);
      expect(chi).toBeLessThan(450);
      // Shannon entropy per byte close to 8 bits.
      const entropy = -counts.reduce(
        (sum, c) => (c ? sum + (c / bytes.length) * Math.log2(c / bytes.length) : sum),
        0,
      );
      expect(entropy).toBeGreaterThan(7.99);
    }
  });

  it("when Math.random is made constant, then tokens and secrets are still unique (they do not come from Math.random)", () => {
    const original = Math.random;
    Math.random = () => 0.5;
    try {
      expect(new Set(Array.from({ length: 1_000 }, generateToken)).size).toBe(1_000);
      expect(new Set(Array.from({ length: 1_000 }, generateWebhookSecret)).size).toBe(1_000);
    } finally {
      Math.random = original;
    }
  });
});
