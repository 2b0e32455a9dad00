/**
 * The vote-counter migration on a database that already holds votes: it backfills the counters
 * from the log in batches (here of 7 ids, so a few hundred votes take many batches), and from then
 * on the log's insert trigger keeps them.
 */
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { listMigrations, MIGRATIONS_DIR, migrate } from "../src/migrate.js";
import { adminQuery, baseDatabaseUrl, randomBotId, randomUserId, withDatabase } from "../src/testing.js";

const COUNTERS = "20261122030000_vote_counters";
const HOUR = 3_600_000;

let name: string;
let url: string;
let client: pg.Client;
let before: string;

beforeAll(async () => {
  name = `botdir_t_mig_${process.pid}_${Date.now()}`;
  url = withDatabase(baseDatabaseUrl(), name);
  // The migrations as they were before the counters.
  before = mkdtempSync(path.join(tmpdir(), "botdir-mig-"));
  for (const m of await listMigrations()) {
    if (m >= COUNTERS) break;
    cpSync(path.join(MIGRATIONS_DIR, m), path.join(before, m), { recursive: true });
  }
  await migrate(url, before);
  client = new pg.Client({ connectionString: url });
  await client.connect();
});

afterAll(async () => {
  await client.end();
  await adminQuery(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  rmSync(before, { recursive: true, force: true });
});

const perHourFromLog = `SELECT bot_id, date_trunc('hour', voted_at, 'UTC') AS hour, count(*)::int AS n
  FROM vote_log GROUP BY 1, 2 ORDER BY 1, 2`;
const perHourFromCounters = `SELECT bot_id, hour, sum(votes)::int AS n
  FROM vote_counts GROUP BY 1, 2 ORDER BY 1, 2`;

describe("migration 20261122030000_vote_counters", () => {
  it("when the database already holds votes, then the batched backfill makes the counters equal the log, and new votes are counted", async () => {
    const bots = [randomBotId(), randomBotId(), randomBotId()];
    for (const id of bots) await client.query("INSERT INTO bots (id, status) VALUES ($1, 'approved')", [id]);
    const start = Date.parse("2026-10-01T00:00:00.000Z");
    // 300 votes over ~50 days, unevenly over the bots, some exactly on hour boundaries.
    const rows = Array.from({ length: 300 }, (_, i) => ({
      bot: bots[i % 7 === 0 ? 1 : i % 11 === 0 ? 2 : 0]!,
      at: new Date(start + (i % 5 === 0 ? Math.floor(i / 5) * HOUR : i * 4 * HOUR + i * 977)),
    }));
    await client.query(
      `INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::timestamptz[])`,
      [rows.map((r) => r.bot), rows.map(() => randomUserId()), rows.map((r) => r.at)],
    );
    await adminQuery(`ALTER DATABASE "${name}" SET botdir.backfill_batch = '7'`);

    const result = await migrate(url);
    expect(result.applied).toContain(COUNTERS);

    const log = await client.query(perHourFromLog);
    const counters = await client.query(perHourFromCounters);
    expect(log.rowCount).toBeGreaterThan(50);
    expect(counters.rows).toEqual(log.rows);

    // After the migration the trigger counts every append.
    await client.query("INSERT INTO vote_log (bot_id, user_id, voted_at) VALUES ($1, $2, $3), ($1, $4, $3)", [
      bots[2],
      randomUserId(),
      new Date(start + 5 * HOUR + 1),
      randomUserId(),
    ]);
    expect((await client.query(perHourFromCounters)).rows).toEqual((await client.query(perHourFromLog)).rows);
  });
});
