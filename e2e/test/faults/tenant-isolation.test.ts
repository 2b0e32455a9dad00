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
import { randomUserId, seedBot } from "@botdir/db/testing";
import { type DnsTestServer, startDnsServer } from "@botdir/webhook-targets/testing";
import { waitFor } from "../../src/processes.js";
import { type Receiver, startReceiver } from "../../src/receivers.js";
import { type Stack, seedWebhookBot, startStack } from "../../src/stack.js";

/** The attempt timeout: healthy deliveries take hundreds of milliseconds; 15 s leaves a loaded machine room. */
const TIMEOUT_MS = 15_000;
const DNS_TIMEOUT_MS = 1_000;
let stack: Stack;
let dns: DnsTestServer;
let tarpit: Receiver;

beforeAll(async () => {
  [dns, tarpit] = await Promise.all([
    startDnsServer((name) => {
      if (name.endsWith(".blackhole.test")) return "drop";
      if (name.endsWith(".test")) return ["127.0.0.1"];
      return undefined;
    }),
    startReceiver(() => "hang"),
  ]);
  stack = await startStack({
    privateRedis: true,
    replicas: { api: 0 },
    env: {
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      WEBHOOK_DNS_TIMEOUT_MS: String(DNS_TIMEOUT_MS),
      WEBHOOK_DNS_SERVERS: dns.address,
      // Retries an hour away: every stuck delivery gets its first attempts only during the test.
      WEBHOOK_RETRY_DELAYS_MS: "3600000,3600000,3600000,3600000",
      DISPATCHER_LOCK_DURATION_MS: "30000",
      DISPATCHER_CONCURRENCY: "40",
      DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK: "2",
    },
  });
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  await tarpit?.close();
  await dns?.close();
});

async function votesFor(url: string, votes: number) {
  const bot = await stack.webhookBot(url);
  for (let i = 0; i < votes; i++) {
    const cast = await stack.vote(bot.id, randomUserId());
    expect(cast.status).toBe(201);
  }
  return bot.id;
}

/** Casts one vote for `botId` (201) and returns its delivery once that has ended in `state`. */
async function voteAndAwaitDelivery(botId: string, state: "delivered" | "failed") {
  const cast = await stack.vote(botId, randomUserId());
  expect(cast.status).toBe(201);
  return waitFor(async () => {
    const [delivery] = await stack.deliveries(botId);
    return delivery?.state === state ? delivery : null;
  }, `the delivery to end ${state}`);
}

async function attemptsOfBot(botId: string) {
  const deliveries = await stack.deliveries(botId);
  return (await Promise.all(deliveries.map((d) => stack.attempts(d.id)))).flat();
}

describe("tenant isolation in the dispatcher", () => {
  it("when 10 bots' receivers hold every request and 5 bots' hosts never resolve, then 20 healthy bots' deliveries all arrive well before the first tarpit times out, and the stuck attempts end as timeout and dns", async () => {
    // Seeded first, so that only their votes are cast once the tarpits hold their slots.
    const healthyBots = await Promise.all(
      Array.from(
        { length: 20 },
        async (_, i) =>
          (
            await seedWebhookBot(
              stack.db,
              stack.keys,
              `http://healthy-${i}.test:${stack.receiver.port}/hook/${i}`,
            )
          ).id,
      ),
    );
    // 10 tarpit bots × 6 votes = 60 jobs and 5 unresolvable bots × 6 votes: without per-webhook
    // caps they would fill all 40 slots.
    const tarpitBots = await Promise.all(
      Array.from({ length: 10 }, (_, i) => votesFor(`http://tarpit-${i}.test:${tarpit.port}/hook`, 6)),
    );
    const deadBots = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        votesFor(`http://h${i}.blackhole.test:${stack.receiver.port}/hook`, 6),
      ),
    );
    // Never answered in this replica: each tarpit bot runs one attempt at a time (slow webhooks get
    // one slot; DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK is for webhooks known to answer quickly).
    await waitFor(() => tarpit.requests.length >= 10, "every tarpit bot to hold its one slot");
    const firstTarpitAt = Math.min(...tarpit.requests.map((r) => r.at));

    await Promise.all(
      healthyBots.map(async (botId) => expect((await stack.vote(botId, randomUserId())).status).toBe(201)),
    );
    await waitFor(
      async () => {
        const rows = await Promise.all(healthyBots.map((b) => stack.deliveries(b)));
        return rows.every((r) => r[0]?.state === "delivered");
      },
      "every healthy delivery",
      TIMEOUT_MS * 2,
      25,
    );
    const healthyArrivals = stack.receiver.requests.filter((r) => r.path.startsWith("/hook/"));
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
    expect(stack.dispatcher.alive()).toBe(true);
  }, 180_000);

  it("when no configured key decrypts a bot's secret, then its delivery ends failed after one secret_unreadable attempt and is never tried again", async () => {
    const bot = await seedBot(stack.db);
    const otherKey = createSecretBox(randomBytes(32));
    await stack.db.prisma.bot.update({
      where: { id: bot.id },
      data: {
        webhookUrl: stack.receiver.url("/unreadable"),
        webhookSecretEncrypted: otherKey.encrypt("whsec_lost"),
      },
    });
    const delivery = await voteAndAwaitDelivery(bot.id, "failed");
    // Sentinel: a delivery handed off now and never queued is picked up again by the relay once it
    // is OUTBOX_STALE_MS old and delivered; a loop on the failed one would have shown up by then.
    const sentinel = await stack.webhookBot(stack.receiver.url("/sentinel"));
    const vote = await stack.db.prisma.vote.create({
      data: { botId: sentinel.id, userId: randomUserId(), votedAt: new Date() },
    });
    await stack.db.prisma.delivery.create({
      data: {
        id: randomUUID(),
        botId: sentinel.id,
        voteId: vote.id,
        nextAttemptAt: new Date(),
        handedOffAt: new Date(),
      },
    });
    await waitFor(() => stack.receiver.forPath("/sentinel").length === 1, "the sentinel delivery");

    const attempts = await stack.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "secret_unreadable"],
    ]);
    expect((await stack.deliveries(bot.id))[0]?.state).toBe("failed");
    expect(stack.receiver.forPath("/unreadable")).toHaveLength(0);
    const lines = stack.dispatcher
      .output()
      .split("\n")
      .filter((l) => l.includes(bot.id) && l.includes("secret_unreadable"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain("whsec_lost");
  }, 30_000);

  it("when recording a 2xx fails once in PostgreSQL, then the record is retried and the delivery ends delivered with one attempt and one request", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/flaky-record"));
    // A real PostgreSQL error on this bot's first attempt row: sequences are not rolled back,
    // so only the first insert fails.
    await stack.db.pool.query("CREATE SEQUENCE fail_once_seq");
    await stack.db.pool.query(`
      CREATE FUNCTION fail_first_attempt() RETURNS trigger AS $$
      BEGIN
        IF NEW.bot_id = '${bot.id}' AND nextval('fail_once_seq') = 1 THEN
          RAISE EXCEPTION 'injected failure of the first attempt record';
        END IF;
        RETURN NEW;
      END $$ LANGUAGE plpgsql`);
    await stack.db.pool.query(
      "CREATE TRIGGER fail_first_attempt BEFORE INSERT ON webhook_attempts FOR EACH ROW EXECUTE FUNCTION fail_first_attempt()",
    );

    const delivery = await voteAndAwaitDelivery(bot.id, "delivered");

    const attempts = await stack.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
    expect(stack.receiver.forPath("/flaky-record")).toHaveLength(1);
    const { rows } = await stack.db.pool.query<{ n: string }>("SELECT last_value AS n FROM fail_once_seq");
    expect(Number(rows[0]?.n)).toBe(2); // the failed insert and the retried one
    expect(stack.dispatcher.output()).toContain("recording the webhook attempt failed; retrying");
  }, 30_000);
});
