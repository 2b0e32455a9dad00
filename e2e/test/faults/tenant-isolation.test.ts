/**
 * Fault: tenants that could break everyone's deliveries, with the real apps as processes. Bots
 * whose receivers hold every request until the timeout and bots whose host names never resolve (a
 * nameserver on loopback that drops their queries: the dispatcher really resolves through it, via
 * WEBHOOK_DNS_SERVERS) take only their per-webhook share of the dispatcher; healthy bots' votes
 * arrive long before the first tarpit times out. A secret no key decrypts ends its delivery
 * `failed` once; an outcome whose recording fails once (a real PostgreSQL error, raised by a
 * trigger) is recorded on the retry, one attempt, `delivered`.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { createSecretBox } from "@botdir/db";
import {
  createTestDatabase,
  type PrivateRedis,
  randomUserId,
  seedBot,
  startRedisServer,
  type TestDatabase,
} from "@botdir/db/testing";
import { type DnsTestServer, startDnsServer } from "@botdir/webhook-targets/testing";
import { type AppProcess, freshKeys, startApp, stopAll, waitFor } from "../../src/processes.js";
import { type Receiver, startReceiver } from "../../src/receivers.js";
import { appEnv, attemptsOf, castVote, deliveriesOf, seedWebhookBot } from "../../src/stack.js";

const TIMEOUT_MS = 8_000;
const DNS_TIMEOUT_MS = 1_000;
const keys = freshKeys();
let t: TestDatabase;
let redis: PrivateRedis;
let dns: DnsTestServer;
let ingest: AppProcess;
let dispatcher: AppProcess;
let good: Receiver;
let tarpit: Receiver;

beforeAll(async () => {
  [t, redis, good, tarpit] = await Promise.all([
    createTestDatabase(),
    startRedisServer(),
    startReceiver(),
    startReceiver(() => "hang"),
  ]);
  dns = await startDnsServer((name) => {
    if (name.endsWith(".blackhole.test")) return "drop";
    if (name.endsWith(".test")) return ["127.0.0.1"];
    return undefined;
  });
  const env = appEnv(
    { databaseUrl: t.url, redisUrl: redis.url, keys },
    {
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      WEBHOOK_DNS_TIMEOUT_MS: String(DNS_TIMEOUT_MS),
      WEBHOOK_DNS_SERVERS: dns.address,
      // Retries an hour away: every stuck delivery gets its first attempts only during the test.
      WEBHOOK_RETRY_DELAYS_MS: "3600000,3600000,3600000,3600000",
      DISPATCHER_LOCK_DURATION_MS: "30000",
      DISPATCHER_CONCURRENCY: "40",
      DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK: "2",
    },
  );
  [ingest, dispatcher] = await Promise.all([
    startApp("vote-ingest", env),
    startApp("webhook-dispatcher", env),
  ]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await redis?.kill();
  await Promise.all([good, tarpit].map((r) => r?.close()));
  await dns?.close();
  await t?.drop();
});

async function votesFor(url: string, votes: number) {
  const bot = await seedWebhookBot(t.db, keys, url);
  for (let i = 0; i < votes; i++) {
    const cast = await castVote(ingest.base, keys.internalKey, bot.id, randomUserId());
    expect(cast.status).toBe(201);
  }
  return bot.id;
}

async function attemptsOfBot(botId: string) {
  const deliveries = await deliveriesOf(t.db, botId);
  return (await Promise.all(deliveries.map((d) => attemptsOf(t.db, d.id)))).flat();
}

describe("tenant isolation in the dispatcher", () => {
  it("when 10 bots' receivers hold every request and 5 bots' hosts never resolve, then 20 healthy bots' deliveries all arrive well before the first tarpit times out, and the stuck attempts end as timeout and dns", async () => {
    // Seeded first, so that only their votes are cast once the tarpits hold their slots.
    const healthyBots = await Promise.all(
      Array.from(
        { length: 20 },
        async (_, i) =>
          (await seedWebhookBot(t.db, keys, `http://healthy-${i}.test:${good.port}/hook/${i}`)).id,
      ),
    );
    // 10 tarpit bots × 6 votes = 60 jobs and 5 unresolvable bots × 6 votes: without per-webhook
    // caps they would fill all 40 slots.
    const tarpitBots = await Promise.all(
      Array.from({ length: 10 }, (_, i) => votesFor(`http://tarpit-${i}.test:${tarpit.port}/hook`, 6)),
    );
    const deadBots = await Promise.all(
      Array.from({ length: 5 }, (_, i) => votesFor(`http://h${i}.blackhole.test:${good.port}/hook`, 6)),
    );
    // Never answered in this replica: each tarpit bot runs one attempt at a time (slow webhooks get
    // one slot; DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK is for webhooks known to answer quickly).
    await waitFor(() => tarpit.requests.length >= 10, "every tarpit bot to hold its one slot");
    const firstTarpitAt = Math.min(...tarpit.requests.map((r) => r.at));

    await Promise.all(
      healthyBots.map(async (botId) =>
        expect((await castVote(ingest.base, keys.internalKey, botId, randomUserId())).status).toBe(201),
      ),
    );
    await waitFor(
      async () => {
        const rows = await Promise.all(healthyBots.map((b) => deliveriesOf(t.db, b)));
        return rows.every((r) => r[0]?.state === "delivered");
      },
      "every healthy delivery",
      TIMEOUT_MS * 2,
      25,
    );
    const healthyArrivals = good.requests.filter((r) => r.path.startsWith("/hook/"));
    const lastHealthyAt = Math.max(...healthyArrivals.map((r) => r.at));

    // Before the first held request timed out: no tarpit attempt is recorded yet.
    expect(lastHealthyAt - firstTarpitAt).toBeLessThan(TIMEOUT_MS);
    expect(new Set(healthyArrivals.map((r) => r.path)).size).toBe(20);
    // One held request per tarpit bot, nothing recorded yet for them.
    expect(tarpit.requests).toHaveLength(10);
    expect((await Promise.all(tarpitBots.map(attemptsOfBot))).flat()).toHaveLength(0);

    // The stuck attempts end: timeout for the tarpits, dns (at its deadline) for the dead hosts.
    const tarpitAttempts = await waitFor(
      async () => {
        const all = await Promise.all(tarpitBots.map(attemptsOfBot));
        return all.every((a) => a.length >= 1) ? all.flat() : null;
      },
      "the tarpit attempts to time out",
      TIMEOUT_MS * 4,
    );
    expect(new Set(tarpitAttempts.map((a) => a.errorKind))).toEqual(new Set(["timeout"]));
    const deadAttempts = (await Promise.all(deadBots.map(attemptsOfBot))).flat();
    expect(deadAttempts.length).toBeGreaterThanOrEqual(5);
    expect(new Set(deadAttempts.map((a) => a.errorKind))).toEqual(new Set(["dns"]));
    // Given up by the DNS deadline (c-ares' own retries may end a little sooner), never by the
    // attempt's timeout.
    for (const a of deadAttempts) expect(a.durationMs).toBeLessThan(TIMEOUT_MS / 2);
    // Every deferred job used no attempt: nothing beyond the capped ones was tried.
    expect(tarpit.requests.length).toBeLessThanOrEqual(10 * 6);
    expect(dispatcher.alive()).toBe(true);
  }, 120_000);

  it("when no configured key decrypts a bot's secret, then its delivery ends failed after one secret_unreadable attempt and is never tried again", async () => {
    const bot = await seedBot(t.db);
    const otherKey = createSecretBox(randomBytes(32));
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookUrl: good.url("/unreadable"), webhookSecretEncrypted: otherKey.encrypt("whsec_lost") },
    });
    const cast = await castVote(ingest.base, keys.internalKey, bot.id, randomUserId());
    expect(cast.status).toBe(201);

    const [delivery] = await waitFor(async () => {
      const rows = await deliveriesOf(t.db, bot.id);
      return rows[0]?.state === "failed" ? rows : null;
    }, "the delivery to fail");
    // Sentinel: a delivery handed off now and never queued is picked up again by the relay once it
    // is OUTBOX_STALE_MS old and delivered; a loop on the failed one would have shown up by then.
    const sentinel = await seedWebhookBot(t.db, keys, good.url("/sentinel"));
    const vote = await t.db.prisma.vote.create({
      data: { botId: sentinel.id, userId: randomUserId(), votedAt: new Date() },
    });
    await t.db.prisma.delivery.create({
      data: {
        id: randomUUID(),
        botId: sentinel.id,
        voteId: vote.id,
        nextAttemptAt: new Date(),
        handedOffAt: new Date(),
      },
    });
    await waitFor(() => good.forPath("/sentinel").length === 1, "the sentinel delivery");

    const attempts = await attemptsOf(t.db, delivery!.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "secret_unreadable"],
    ]);
    expect((await deliveriesOf(t.db, bot.id))[0]?.state).toBe("failed");
    expect(good.forPath("/unreadable")).toHaveLength(0);
    const lines = dispatcher
      .output()
      .split("\n")
      .filter((l) => l.includes(bot.id) && l.includes("secret_unreadable"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain("whsec_lost");
  }, 30_000);

  it("when recording a 2xx fails once in PostgreSQL, then the record is retried and the delivery ends delivered with one attempt and one request", async () => {
    const bot = await seedWebhookBot(t.db, keys, good.url("/flaky-record"));
    // A real PostgreSQL error on this bot's first attempt row: sequences are not rolled back,
    // so only the first insert fails.
    await t.db.pool.query("CREATE SEQUENCE fail_once_seq");
    await t.db.pool.query(`
      CREATE FUNCTION fail_first_attempt() RETURNS trigger AS $$
      BEGIN
        IF NEW.bot_id = '${bot.id}' AND nextval('fail_once_seq') = 1 THEN
          RAISE EXCEPTION 'injected failure of the first attempt record';
        END IF;
        RETURN NEW;
      END $$ LANGUAGE plpgsql`);
    await t.db.pool.query(
      "CREATE TRIGGER fail_first_attempt BEFORE INSERT ON webhook_attempts FOR EACH ROW EXECUTE FUNCTION fail_first_attempt()",
    );

    const cast = await castVote(ingest.base, keys.internalKey, bot.id, randomUserId());
    expect(cast.status).toBe(201);
    const [delivery] = await waitFor(async () => {
      const rows = await deliveriesOf(t.db, bot.id);
      return rows[0]?.state === "delivered" ? rows : null;
    }, "the delivery to be delivered");

    const attempts = await attemptsOf(t.db, delivery!.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
    expect(good.forPath("/flaky-record")).toHaveLength(1);
    const { rows } = await t.db.pool.query<{ n: string }>("SELECT last_value AS n FROM fail_once_seq");
    expect(Number(rows[0]?.n)).toBe(2); // the failed insert and the retried one
    expect(dispatcher.output()).toContain("recording the webhook attempt failed; retrying");
  }, 30_000);
});
