/**
 * `pnpm --filter @botdir/bench reminders`: what one batch of the vote.available scheduler costs
 * with few and with many reminders pending, in the same run on the same database. The scheduler
 * (scheduleReminders of @botdir/db, one statement per batch) turns REMINDER_BATCH (500) due
 * reminders into deliveries; it is timed with BENCH_REMINDERS_FEW (1,000) and then
 * BENCH_REMINDERS_MANY (1,000,000) reminders pending in the future, BENCH_REMINDERS_ROUNDS (7)
 * batches each, and the medians compared. Redis keys are counted before and after the pending
 * reminders are written: they live in PostgreSQL only, so the count must not move.
 */
import { randomBytes } from "node:crypto";
import {
  createDb,
  DEFAULT_DATABASE_URL,
  DEFAULT_REDIS_URL,
  ensureDatabase,
  migrate,
  scheduleReminders,
} from "@botdir/db";
import { Redis } from "ioredis";
import pg from "pg";

const BATCH = 500;
const few = Number(process.env.BENCH_REMINDERS_FEW ?? 1_000);
const many = Number(process.env.BENCH_REMINDERS_MANY ?? 1_000_000);
const rounds = Number(process.env.BENCH_REMINDERS_ROUNDS ?? 7);

// A scratch database of its own, migrated, dropped at the end.
const base = process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
const dbName = `botdir_bench_reminders_${randomBytes(4).toString("hex")}`;
const url = new URL(base);
url.pathname = `/${dbName}`;
await ensureDatabase(url.toString());
await migrate(url.toString());
const t = { db: createDb({ url: url.toString() }) };
// VACUUM of a million rows outlasts the pool's statement timeout: a client of its own, without one.
const setup = new pg.Client({ connectionString: url.toString() });
await setup.connect();
const redis = new Redis(process.env.REDIS_URL ?? DEFAULT_REDIS_URL, { maxRetriesPerRequest: 1 });
let users = 0;

try {
  const bot = { id: "123456789012345678" };
  await t.db.pool.query(
    `INSERT INTO bots (id, status, webhook_url, webhook_secret_encrypted, webhook_events, updated_at)
     VALUES ($1, 'approved', 'https://hooks.example.com/v', 'x', '{vote.create,vote.available}', now())`,
    [bot.id],
  );

  /** Adds `n` reminders due a day from now or later (window rows only, as a cast leaves them). */
  async function addPending(n: number): Promise<void> {
    // In statements of 50,000 rows: each stays under the pool's statement timeout.
    for (let left = n; left > 0; left -= 50_000) await addPendingChunk(Math.min(left, 50_000));
  }

  async function addPendingChunk(n: number): Promise<void> {
    const from = users;
    users += n;
    await t.db.pool.query(
      `INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id, remind_at)
       SELECT $1, (100000000000000000 + i)::text, now(), i, now() + interval '1 day' + i * interval '1 ms'
         FROM generate_series($2::bigint, $3::bigint - 1) AS i`,
      [bot.id, from, users],
    );
  }

  /** Adds one batch of due reminders with their votes (a delivery needs its vote's row). */
  async function addDue(): Promise<void> {
    const from = users;
    users += BATCH;
    await t.db.pool.query(
      `WITH v AS (
         INSERT INTO vote_log (bot_id, user_id, voted_at)
         SELECT $1, (100000000000000000 + i)::text, now() - interval '12 hours'
           FROM generate_series($2::bigint, $3::bigint - 1) AS i
         RETURNING id, user_id, voted_at)
       INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id, remind_at)
       SELECT $1, v.user_id, v.voted_at, v.id, now() - interval '1 second' FROM v`,
      [bot.id, from, users],
    );
  }

  /** The median time of one scheduler batch over `rounds` batches of due reminders. */
  async function batchMs(): Promise<number> {
    const times: number[] = [];
    for (let i = 0; i < rounds; i++) {
      await addDue();
      const started = performance.now();
      const { claimed, deliveries } = await scheduleReminders(t.db, new Date(), BATCH);
      times.push(performance.now() - started);
      if (claimed !== BATCH || deliveries.length !== BATCH)
        throw new Error(`batch made ${deliveries.length}`);
    }
    times.sort((a, b) => a - b);
    return times[Math.floor(times.length / 2)] as number;
  }

  const keysBefore = await redis.dbsize();
  await addPending(few);
  await setup.query("VACUUM ANALYZE vote_windows");
  const fewMs = await batchMs();
  const filled = performance.now();
  await addPending(many - few);
  await setup.query("VACUUM ANALYZE vote_windows");
  const fillS = (performance.now() - filled) / 1000;
  const keysAfter = await redis.dbsize();
  const manyMs = await batchMs();
  const { rows } = await t.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM vote_windows WHERE remind_at IS NOT NULL",
  );
  const result = {
    batch: BATCH,
    rounds,
    pending: { few, many: rows[0]?.n ?? 0 },
    medianBatchMs: { few: Math.round(fewMs * 10) / 10, many: Math.round(manyMs * 10) / 10 },
    ratioManyToFew: Math.round((manyMs / fewMs) * 100) / 100,
    redisKeys: { beforePending: keysBefore, afterPending: keysAfter },
    fillSeconds: Math.round(fillS),
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
} finally {
  redis.disconnect();
  await setup.end();
  await t.db.close();
  const adminUrl = new URL(base);
  adminUrl.pathname = "/postgres";
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
  await admin.end();
}
