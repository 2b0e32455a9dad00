import { randomUUID } from "node:crypto";
import { parseMetrics, randomUserId, sampleValue, seedBot, useTestDatabase } from "@botdir/db/testing";
import { createMetricsRegistry, ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import {
  createRetentionMetrics,
  firstRetentionDelayMs,
  RETENTION_LOCK_ID,
  runRetention,
  scheduleRetention,
} from "../src/retention.js";

const t = useTestDatabase();
const DAY = 24 * 60 * 60 * 1000;
const MIN = 60 * 1000;
const clock = new ManualClock("2026-11-21T12:00:00.000Z");
const ago = (ms: number) => new Date(clock.now().getTime() - ms);

/** A vote, its delivery in `state` (completed at `at` unless pending) and `attempts` attempts at `at`. */
async function seedDelivery(
  botId: string,
  state: "pending" | "delivered" | "failed",
  at: Date,
  attempts: number,
): Promise<string> {
  const vote = await t.db.prisma.vote.create({ data: { botId, userId: randomUserId(), votedAt: at } });
  const id = randomUUID();
  await t.db.prisma.delivery.create({
    data: {
      id,
      botId,
      voteId: vote.id,
      state,
      attemptsMade: attempts,
      nextAttemptAt: at,
      createdAt: at,
      completedAt: state === "pending" ? null : at,
    },
  });
  for (let n = 1; n <= attempts; n++) {
    await t.db.prisma.attempt.create({
      data: {
        deliveryId: id,
        botId,
        series: 0,
        attemptNumber: n,
        durationMs: 3,
        attemptedAt: new Date(at.getTime() + n),
      },
    });
  }
  return id;
}

const exists = async (id: string) => (await t.db.prisma.delivery.count({ where: { id } })) === 1;

describe("delivery retention", () => {
  it("when final deliveries are older than the retention, then they go with their attempts, except each bot's last ten attempts and every pending delivery", async () => {
    const a = await seedBot(t.db);
    const b = await seedBot(t.db);
    // Bot A: 15 old delivered (one attempt each), 2 recent delivered, 1 very old pending.
    const oldA: string[] = [];
    for (let i = 0; i < 15; i++) oldA.push(await seedDelivery(a.id, "delivered", ago(40 * DAY - i * MIN), 1));
    const recentA = [
      await seedDelivery(a.id, "delivered", ago(5 * DAY), 1),
      await seedDelivery(a.id, "delivered", ago(4 * DAY), 1),
    ];
    const pendingA = await seedDelivery(a.id, "pending", ago(90 * DAY), 2);
    // Bot B: 3 old failed deliveries of 5 attempts each: its last ten attempts are the two newest.
    const oldB: string[] = [];
    for (let i = 0; i < 3; i++) oldB.push(await seedDelivery(b.id, "failed", ago(60 * DAY - i * MIN), 5));
    const votes = await t.db.prisma.vote.count();

    const registry = createMetricsRegistry("webhook-dispatcher");
    const result = await runRetention(
      { db: t.db, clock, metrics: createRetentionMetrics(registry) },
      { retentionDays: 30, batchSize: 4 },
    );

    // A's last ten attempts: its 2 recent and the 8 newest old ones (indexes 7..14) stay.
    for (const [i, id] of oldA.entries()) expect([id, await exists(id)]).toEqual([id, i >= 7]);
    for (const id of recentA) expect(await exists(id)).toBe(true);
    // Pending is never pruned, however old (its attempts were not among the last ten either).
    expect(await exists(pendingA)).toBe(true);
    expect(await t.db.prisma.attempt.count({ where: { deliveryId: pendingA } })).toBe(2);
    expect([await exists(oldB[0]!), await exists(oldB[1]!), await exists(oldB[2]!)]).toEqual([
      false,
      true,
      true,
    ]);
    expect(
      await t.db.prisma.attempt.count({ where: { deliveryId: { in: [...oldA.slice(0, 7), oldB[0]!] } } }),
    ).toBe(0);

    expect(result).toMatchObject({ ran: true, deliveries: 8, attempts: 12 });
    expect(result.batches).toBeGreaterThan(3);
    // The vote log is untouched.
    expect(await t.db.prisma.vote.count()).toBe(votes);
    const samples = parseMetrics(await registry.metrics());
    expect(sampleValue(samples, "botdir_retention_pruned_rows_total", { table: "webhook_deliveries" })).toBe(
      8,
    );
    expect(sampleValue(samples, "botdir_retention_pruned_rows_total", { table: "webhook_attempts" })).toBe(
      12,
    );

    // A second run finds nothing more to prune.
    expect(await runRetention({ db: t.db, clock }, { retentionDays: 30, batchSize: 4 })).toMatchObject({
      deliveries: 0,
      attempts: 0,
    });
  });

  it("when vote counters are older than the widget's window, then they are deleted and the recent ones kept", async () => {
    const bot = await seedBot(t.db);
    const hour = (ms: number) => new Date(Math.floor((clock.now().getTime() - ms) / 3_600_000) * 3_600_000);
    await t.db.pool.query(
      `INSERT INTO vote_counts (bot_id, hour, shard, votes)
       SELECT $1, h, 0, 3 FROM unnest($2::timestamptz[]) AS h`,
      [bot.id, [hour(40 * DAY), hour(33 * DAY), hour(31 * DAY), hour(DAY)]],
    );
    const result = await runRetention({ db: t.db, clock }, { retentionDays: 30, batchSize: 100 });
    expect(result.voteCounts).toBe(2);
    const { rows } = await t.db.pool.query<{ hour: Date }>(
      "SELECT hour FROM vote_counts WHERE bot_id = $1 ORDER BY hour",
      [bot.id],
    );
    expect(rows.map((r) => r.hour.getTime())).toEqual([hour(31 * DAY).getTime(), hour(DAY).getTime()]);
  });

  it("when test events are older than the retention, then they are deleted except each bot's newest ten", async () => {
    const [busy, quiet] = [await seedBot(t.db), await seedBot(t.db)];
    const seedTests = (botId: string, at: Date[]) =>
      t.db.pool.query(
        `INSERT INTO webhook_test_attempts (id, bot_id, status_code, duration_ms, delivered, attempted_at)
         SELECT gen_random_uuid(), $1, 204, 3, true, a FROM unnest($2::timestamptz[]) AS a`,
        [botId, at],
      );
    // busy: 12 old tests and 3 recent ones; quiet: only 2 old ones (its newest ten include them).
    await seedTests(busy.id, [
      ...Array.from({ length: 12 }, (_, i) => ago(40 * DAY + i * MIN)),
      ...Array.from({ length: 3 }, (_, i) => ago(DAY + i * MIN)),
    ]);
    await seedTests(quiet.id, [ago(60 * DAY), ago(61 * DAY)]);
    const registry = createMetricsRegistry("dispatcher");
    const metrics = createRetentionMetrics(registry);

    const result = await runRetention({ db: t.db, clock, metrics }, { retentionDays: 30, batchSize: 4 });

    const left = async (botId: string) =>
      (
        await t.db.pool.query<{ at: Date }>(
          "SELECT attempted_at AS at FROM webhook_test_attempts WHERE bot_id = $1 ORDER BY attempted_at DESC",
          [botId],
        )
      ).rows.map((r) => r.at.getTime());
    expect(result.testAttempts).toBe(5);
    const busyLeft = await left(busy.id);
    expect(busyLeft).toHaveLength(10);
    expect(busyLeft.slice(0, 3)).toEqual(
      [ago(DAY), ago(DAY + MIN), ago(DAY + 2 * MIN)].map((d) => d.getTime()),
    );
    expect(busyLeft[9]).toBe(ago(40 * DAY + 6 * MIN).getTime());
    expect(await left(quiet.id)).toHaveLength(2);
    const scraped = parseMetrics(await registry.metrics());
    expect(
      sampleValue(scraped, "botdir_retention_pruned_rows_total", { table: "webhook_test_attempts" }),
    ).toBe(5);
  });

  it("when another replica holds the retention lock, then this run does nothing", async () => {
    const bot = await seedBot(t.db);
    const id = await seedDelivery(bot.id, "delivered", ago(50 * DAY), 1);
    for (let i = 0; i < 10; i++) await seedDelivery(bot.id, "delivered", ago(DAY), 1);
    const other = await t.db.pool.connect();
    try {
      await other.query("SELECT pg_advisory_lock($1)", [RETENTION_LOCK_ID]);
      const result = await runRetention({ db: t.db, clock }, { retentionDays: 30, batchSize: 100 });
      expect(result.ran).toBe(false);
      expect(await exists(id)).toBe(true);
    } finally {
      await other.query("SELECT pg_advisory_unlock($1)", [RETENTION_LOCK_ID]);
      other.release();
    }
    expect((await runRetention({ db: t.db, clock }, { retentionDays: 30, batchSize: 100 })).ran).toBe(true);
    expect(await exists(id)).toBe(false);
  });

  it("when scheduled, then each run writes one log line with what it pruned", async () => {
    const lines: object[] = [];
    const logger = { ...silentLogger, info: (obj: object) => void lines.push(obj) };
    const scheduled = scheduleRetention(
      { db: t.db, clock, logger },
      { retentionDays: 30, batchSize: 100, intervalMs: 60_000, firstDelayMs: 0 },
    );
    const deadline = Date.now() + 5_000;
    while (lines.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await scheduled.stop();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ event: "retention_run", ran: true, deliveries: 0 });
  });
});

describe("delivery retention after a failed run", () => {
  it("when PostgreSQL is unreachable for a run, then the next run comes after the retry delay, doubled per failure, not an interval later", async () => {
    const { freePort } = await import("@botdir/test-stores");
    // The first two runs reach for a server that is not there (a failover in progress).
    const nowhere = `postgresql://postgres@127.0.0.1:${await freePort()}/botdir`;
    let attempts = 0;
    const db = {
      ...t.db,
      connectDedicated: (url?: string, options?: { applicationName?: string }) =>
        ++attempts <= 2 ? t.db.connectDedicated(nowhere, options) : t.db.connectDedicated(url, options),
    };
    const failures: { retryInMs: number }[] = [];
    const runs: object[] = [];
    const logger = {
      ...silentLogger,
      error: (obj: { retryInMs: number }) => void failures.push(obj),
      info: (obj: object) => void runs.push(obj),
    };
    const started = Date.now();
    const scheduled = scheduleRetention(
      { db, clock, logger },
      { retentionDays: 30, batchSize: 100, intervalMs: 3_600_000, firstDelayMs: 0, retryMs: 50 },
    );
    const deadline = Date.now() + 20_000;
    while (runs.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await scheduled.stop();
    expect(failures.map((f) => f.retryInMs)).toEqual([50, 100]);
    expect(runs).toHaveLength(1);
    expect(runs[0]).toMatchObject({ event: "retention_run", ran: true });
    expect(Date.now() - started).toBeLessThan(20_000);
  });
});

describe("the first retention run of a replica", () => {
  it("when the interval is an hour, then it comes 1–2 minutes after start; when it is shorter than a minute, then 1–2 intervals after start", () => {
    expect(firstRetentionDelayMs(3_600_000, 0)).toBe(60_000);
    expect(firstRetentionDelayMs(3_600_000, 0.999)).toBe(119_940);
    expect(firstRetentionDelayMs(60_000, 0.5)).toBe(90_000);
    expect(firstRetentionDelayMs(1_000, 0)).toBe(1_000);
    expect(firstRetentionDelayMs(1_000, 0.999)).toBe(1_999);
  });
});
