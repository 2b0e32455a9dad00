import { randomUUID } from "node:crypto";
import { randomUserId, seedBot, useForFile } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { capturingLogger, redisReady, silentLogger } from "@botdir/service-kit/testing";
import { startRedisServer } from "@botdir/test-stores";
import request from "supertest";
import type { DeliveryQueue } from "../src/outbox/queue.js";
import { createOutboxRelay } from "../src/outbox/relay.js";
import { deliveriesOf, INTERNAL_KEY, setWebhook, startIngestFixture, testQueue } from "./support/votes.js";

const START = "2026-11-21T12:00:00.000Z";
const STALE_MS = 60_000;

/** The vote-ingest fixture on a Redis server of this file's own, which the tests stop and restart. */
const t = useForFile(
  "the vote-ingest fixture on a Redis of its own",
  async () => {
    const privateRedis = await startRedisServer();
    return { ...(await startIngestFixture({ redisUrl: privateRedis.url })), privateRedis };
  },
  async (fixture) => {
    await fixture.close();
    await fixture.privateRedis.stop();
  },
);
let clock: ManualClock;

beforeEach(async () => {
  clock = new ManualClock(START);
  // Every test starts from an empty outbox, so relay counts belong to the test.
  await t.db.pool.query("UPDATE webhook_deliveries SET state = 'delivered' WHERE state = 'pending'");
});

/** Polls `condition` every 20 ms until it holds; fails after 15 s. */
async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function relay(options: { logger?: ReturnType<typeof capturingLogger>; batchSize?: number } = {}) {
  return createOutboxRelay({
    db: t.db,
    queue: t.queue,
    clock,
    logger: options.logger ?? silentLogger,
    staleMs: STALE_MS,
    graceMs: 5_000,
    batchSize: options.batchSize ?? 100,
  });
}

async function castWithWebhook(): Promise<{ botId: string; deliveryId: string }> {
  const bot = await seedBot(t.db);
  await setWebhook(t.db, bot.id);
  const app = t.app({ clock });
  const res = await request(app)
    .post("/internal/v1/votes")
    .set("Authorization", INTERNAL_KEY)
    .send({ bot_id: bot.id, user_id: randomUserId() });
  expect(res.status).toBe(201);
  await t.queue.flush();
  const [delivery] = await deliveriesOf(t.db, bot.id);
  if (!delivery) throw new Error("no delivery row");
  return { botId: bot.id, deliveryId: delivery.id };
}

/** A pending delivery row written directly, as if its vote had just been committed. */
async function insertDelivery(options: { handedOffAt?: Date | null; state?: string } = {}): Promise<string> {
  const bot = await seedBot(t.db);
  const now = clock.now();
  const { rows } = await t.db.pool.query<{ id: number }>(
    "INSERT INTO vote_log (bot_id, user_id, voted_at) VALUES ($1, $2, $3) RETURNING id",
    [bot.id, randomUserId(), now],
  );
  const id = randomUUID();
  await t.db.pool.query(
    `INSERT INTO webhook_deliveries (id, bot_id, vote_id, state, next_attempt_at, handed_off_at, created_at)
     VALUES ($1, $2, $3, $4::delivery_state, $5, $6, $5)`,
    [id, bot.id, rows[0]?.id, options.state ?? "pending", now, options.handedOffAt ?? null],
  );
  return id;
}

describe("outbox relay", () => {
  it("when a vote is cast while Redis is down, then 201, and after Redis restarts empty the relay hands the delivery off", async () => {
    await t.privateRedis.stop();
    const logger = capturingLogger();
    const outbox = relay({ logger });

    const { botId, deliveryId } = await castWithWebhook();
    const [pendingRow] = await deliveriesOf(t.db, botId);
    expect(pendingRow).toMatchObject({ state: "pending", handed_off_at: null });
    clock.advance(10_000);
    expect(await outbox.tick()).toBe(0);
    expect(await outbox.tick()).toBe(0);
    expect(logger.lines.filter((l) => l.level === "warn")).toHaveLength(1); // one line per outage

    await t.privateRedis.restart();
    await redisReady(t.redis);
    expect(await t.queue.queue.getJob(deliveryId)).toBeUndefined(); // Redis came back empty
    const handed = await outbox.tick();

    expect(handed).toBe(1);
    const job = await t.queue.queue.getJob(deliveryId);
    expect(job?.name).toBe("vote.create");
    expect(job?.data).toEqual({ deliveryId, botId });
    const [row] = await deliveriesOf(t.db, botId);
    expect(row?.handed_off_at?.toISOString()).toBe(clock.now().toISOString());
    expect(logger.lines.some((l) => l.level === "info" && /resumed/.test(l.msg ?? ""))).toBe(true);
  });

  it("when a handed-off job is lost (Redis restarted empty), then it is handed off again only once it is stale", async () => {
    const { botId, deliveryId } = await castWithWebhook();
    expect(await t.queue.queue.getJob(deliveryId)).toBeDefined();
    await t.privateRedis.restart();
    await redisReady(t.redis);
    const outbox = relay();

    clock.advance(STALE_MS - 1);
    const beforeStale = await outbox.tick();
    clock.advance(1);
    const atStale = await outbox.tick();

    expect(beforeStale).toBe(0);
    expect(atStale).toBe(1);
    expect((await t.queue.queue.getJob(deliveryId))?.data).toEqual({ deliveryId, botId });
  });

  it("when the request path already handed a delivery off, then the relay leaves it alone", async () => {
    const { deliveryId } = await castWithWebhook();
    const outbox = relay();
    clock.advance(10_000);

    expect(await outbox.tick()).toBe(0);
    expect(await t.queue.queue.getJob(deliveryId)).toBeDefined();
  });

  it("when a delivery was never handed off, then the relay waits for the grace period before taking it", async () => {
    const id = await insertDelivery();
    const outbox = relay();

    const early = await outbox.tick();
    clock.advance(5_000);
    const later = await outbox.tick();

    expect(early).toBe(0);
    expect(later).toBe(1);
    expect(await t.queue.queue.getJob(id)).toBeDefined();
  });

  it("when a redelivery (series 1) of a delivery created a moment ago was never handed off, then the relay takes it at the next tick, without the grace period", async () => {
    const id = await insertDelivery();
    await t.db.pool.query("UPDATE webhook_deliveries SET series = 1 WHERE id = $1", [id]);
    const firstSeries = await insertDelivery();

    expect(await relay().tick()).toBe(1);
    expect(await t.queue.queue.getJob(id)).toBeDefined();
    expect(await t.queue.queue.getJob(firstSeries)).toBeUndefined();
  });

  it("when deliveries are delivered or failed, then the relay never hands them off", async () => {
    const delivered = await insertDelivery({ state: "delivered" });
    const failed = await insertDelivery({ state: "failed" });
    const outbox = relay();
    clock.advance(10 * STALE_MS);

    expect(await outbox.tick()).toBe(0);
    expect(await t.queue.queue.getJob(delivered)).toBeUndefined();
    expect(await t.queue.queue.getJob(failed)).toBeUndefined();
  });

  it("when two relays (two replicas) tick at once, then each delivery is claimed by exactly one of them", async () => {
    const ids = await Promise.all(Array.from({ length: 30 }, () => insertDelivery()));
    clock.advance(5_000);
    const a = relay({ batchSize: 7 });
    const b = relay({ batchSize: 7 });

    const [fromA, fromB] = await Promise.all([a.tick(), b.tick()]);

    expect(fromA + fromB).toBe(30);
    const jobs = await Promise.all(ids.map((id) => t.queue.queue.getJob(id)));
    expect(jobs.every((job) => job !== undefined)).toBe(true);
  });

  it("when deliveries are pending, then backlog reports their count and how overdue the oldest is", async () => {
    await insertDelivery({ handedOffAt: clock.now() });
    clock.advance(1_000);
    await insertDelivery({ handedOffAt: clock.now() });
    clock.advance(2_500);

    const backlog = await relay().backlog();

    expect(backlog).toEqual({ pending: 2, oldestAgeMs: 3_500 });
  });

  it("when the relay is started and stopped, then it ticks on its own and stop waits for the tick", async () => {
    const id = await insertDelivery();
    clock.advance(5_000);
    const outbox = createOutboxRelay({
      db: t.db,
      queue: t.queue,
      clock,
      logger: silentLogger,
      intervalMs: 50,
    });

    outbox.start();
    await until(() => outbox.stats().handedOff > 0, "the relay to hand the delivery off");
    await outbox.stop();
    const ticks = outbox.stats().ticks;
    // Sentinel: a relay with the same interval, started after the stop, ticks three times; the
    // stopped one would have ticked in that time too.
    const sentinel = createOutboxRelay({
      db: t.db,
      queue: t.queue,
      clock,
      logger: silentLogger,
      intervalMs: 50,
    });
    sentinel.start();
    try {
      await until(() => sentinel.stats().ticks >= 3, "the sentinel relay to tick three times");
    } finally {
      await sentinel.stop();
    }

    expect(await t.queue.queue.getJob(id)).toBeDefined();
    expect(outbox.stats().ticks).toBe(ticks); // no tick after stop
  });
});

describe("request-path hand-off", () => {
  /** Records every addBulk of `q` (each is one MULTI to Redis); the jobs still go to Redis. */
  async function countingAddBulk<T>(q: DeliveryQueue, work: () => Promise<T>) {
    const original = q.queue.addBulk;
    const calls: Parameters<typeof original>[0][] = [];
    q.queue.addBulk = (jobs) => {
      calls.push(jobs);
      return original.call(q.queue, jobs);
    };
    try {
      return { result: await work(), calls };
    } finally {
      q.queue.addBulk = original;
    }
  }

  it("when several votes are handed off in one event-loop turn with DELIVERY_JOB_BATCH_MAX=1, then they reach Redis as one addBulk of one vote.create job each, waiting (not delayed) and marked", async () => {
    const single = testQueue(t.db, t.redis, silentLogger, { batchMax: 1 });
    try {
      const ids = await Promise.all([insertDelivery(), insertDelivery(), insertDelivery()]);
      const now = clock.now();
      const { result: results, calls } = await countingAddBulk(single, () =>
        Promise.all(
          ids.map((id, i) => {
            const at = new Date(now.getTime() + i);
            return single.handOff({ id, attemptsMade: 0, nextAttemptAt: at }, at);
          }),
        ),
      );
      expect(results).toEqual([true, true, true]);
      expect(calls).toHaveLength(1);
      expect(calls[0]?.map((j) => j.opts?.jobId)).toEqual(ids);
      expect(calls[0]?.map((j) => j.name)).toEqual(["vote.create", "vote.create", "vote.create"]);
      for (const id of ids) expect(await (await single.queue.getJob(id))?.getState()).toBe("waiting");
      await single.flush();
      const { rows } = await t.db.pool.query(
        "SELECT count(*)::int AS n FROM webhook_deliveries WHERE id = ANY($1) AND handed_off_at IS NOT NULL",
        [ids],
      );
      expect(rows[0].n).toBe(3);
    } finally {
      await single.close();
    }
  });

  it("when ten due votes and a delayed one are handed off in one turn with DELIVERY_JOB_BATCH_MAX=4, then one addBulk carries ⌈10/4⌉ = 3 vote.batch jobs holding each due delivery once and a delayed vote.create job, all marked", async () => {
    const batched = testQueue(t.db, t.redis, silentLogger, { batchMax: 4 });
    try {
      const bot = await seedBot(t.db);
      const due = await Promise.all(Array.from({ length: 10 }, () => insertDelivery()));
      const later = await insertDelivery();
      const now = clock.now();
      const { result: results, calls } = await countingAddBulk(batched, () =>
        Promise.all([
          ...due.map((id) =>
            batched.handOff({ id, botId: bot.id, attemptsMade: 0, nextAttemptAt: now }, now),
          ),
          batched.handOff(
            { id: later, attemptsMade: 1, nextAttemptAt: new Date(now.getTime() + 60_000) },
            now,
          ),
        ]),
      );

      expect(results).toEqual(Array.from({ length: 11 }, () => true));
      expect(calls).toHaveLength(1);
      const jobs = calls[0] ?? [];
      const batches = jobs.filter((j) => j.name === "vote.batch");
      expect(batches).toHaveLength(3);
      const items = batches.flatMap(
        (j) => (j.data as { deliveries: { deliveryId: string; botId?: string }[] }).deliveries,
      );
      expect(items.map((d) => d.deliveryId).sort()).toEqual([...due].sort());
      expect(items.every((d) => d.botId === bot.id)).toBe(true);
      for (const j of batches) {
        const size = (j.data as { deliveries: unknown[] }).deliveries.length;
        expect(size).toBeGreaterThanOrEqual(2);
        expect(size).toBeLessThanOrEqual(4);
      }
      const singles = jobs.filter((j) => j.name === "vote.create");
      expect(singles.map((j) => j.opts?.jobId)).toEqual([later]);
      expect(await (await batched.queue.getJob(later))?.getState()).toBe("delayed");
      const counts = await batched.queue.getJobCounts("waiting", "delayed");
      expect(counts).toEqual({ waiting: 3, delayed: 1 });
      await batched.flush();
      const { rows } = await t.db.pool.query(
        "SELECT count(*)::int AS n FROM webhook_deliveries WHERE id = ANY($1) AND handed_off_at IS NOT NULL",
        [[...due, later]],
      );
      expect(rows[0].n).toBe(11);
    } finally {
      await batched.close();
    }
  });

  it("when a single vote is handed off in a turn, then it gets a vote.create job whose id is the delivery id, even with batching on", async () => {
    const { botId, deliveryId } = await castWithWebhook();

    const job = await t.queue.queue.getJob(deliveryId);
    expect(job?.name).toBe("vote.create");
    expect(job?.data).toEqual({ deliveryId, botId });
    const jobs = await t.queue.queue.getJobs(["waiting", "delayed"]);
    expect(jobs.filter((j) => j.name === "vote.batch")).toEqual([]);
  });
});
