/**
 * The functions that reach deliveries by an array of ids (botdir_claim_deliveries,
 * botdir_record_attempts, botdir_redeliver) must not scan webhook_deliveries on a fresh install:
 * an empty table that nothing has analysed (no autovacuum, or not yet). PostgreSQL may keep a
 * generic plan of each of their statements for the rest of a session after five calls; on such a
 * table the generic plan of `id = ANY(ids)` is a sequential scan, which then reads the whole table
 * at every call while the table grows with every vote (docs/performance.md, `soak`). Migration
 * 20261128140000_by_id_custom_plans plans them with each call's ids instead.
 */
import type pg from "pg";
import {
  createTestDatabase,
  type NestedPlan,
  nestedPlans,
  planNodes,
  seedBot,
  type TestDatabase,
} from "../src/testing.js";

let t: TestDatabase;
let botId: string;

beforeAll(async () => {
  t = await createTestDatabase();
  botId = (await seedBot(t.db)).id;
  await t.db.pool.query(
    "UPDATE bots SET webhook_url = 'https://example.com/hook', webhook_secret_encrypted = 'x' WHERE id = $1",
    [botId],
  );
}, 60_000);

afterAll(async () => {
  await t?.drop();
});

/** Every sequential scan of webhook_deliveries in `plans`, by alias. */
function deliverySeqScans(plans: NestedPlan[]): string[] {
  return plans
    .flatMap((plan) => planNodes(plan.Plan))
    .filter((node) => node["Relation Name"] === "webhook_deliveries" && node["Node Type"] !== "ModifyTable")
    .filter((node) => node["Node Type"] === "Seq Scan")
    .map((node) => `${node.Alias}: Seq Scan`);
}

const uuids = (ids: string[]) => `'{${ids.join(",")}}'::uuid[]`;

/** Claims `ids` (waiting for their row locks when `wait`); claims nothing that is not pending. */
function claim(client: pg.PoolClient, ids: string[], wait: boolean) {
  return client.query(
    `SELECT * FROM botdir_claim_deliveries(${uuids(ids)}, ${wait}, now() + interval '1 minute', now(), now(), 5)`,
  );
}

/** Records a delivered attempt of each of `ids`, under a lease none of them holds (nothing is written). */
function record(client: pg.PoolClient, ids: string[], wait: boolean) {
  const each = (value: string) => `ARRAY[${ids.map(() => value).join(",")}]`;
  return client.query(
    `SELECT * FROM botdir_record_attempts(${wait}, ${uuids(ids)}, ${each("1")}::int[], ${each("now()")}::timestamptz[],
       ${each("'delivered'")}::text[], ${each("NULL")}::timestamptz[], ${each("now()")}::timestamptz[],
       ${each("now()")}::timestamptz[], ${each(`'${botId}'`)}::varchar[], ${each("200")}::int[],
       ${each("NULL")}::text[], ${each("5")}::int[], ${each("now()")}::timestamptz[])`,
  );
}

function redeliver(client: pg.PoolClient, id: string) {
  return client.query(`SELECT * FROM botdir_redeliver('${id}'::uuid, '${botId}', now(), NULL)`);
}

/** Every by-id call the dispatcher and a redelivery make: one id waiting, a batch skipping locked rows. */
async function everyCall(client: pg.PoolClient, ids: string[]): Promise<void> {
  await claim(client, ids.slice(0, 1), true);
  await claim(client, ids, false);
  await record(client, ids.slice(0, 1), true);
  await record(client, ids, false);
  await redeliver(client, ids[0] as string);
}

/** `count` delivered deliveries of the test bot (and their votes), inserted on `client`. */
async function insertDeliveries(client: pg.PoolClient, count: number): Promise<string[]> {
  const { rows } = await client.query<{ id: string }>(
    `WITH v AS (
       INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT $1, (200000000000000000 + g)::text, now() - interval '1 hour' FROM generate_series(1, $2::int) g
       RETURNING id, bot_id, voted_at
     )
     INSERT INTO webhook_deliveries
            (id, bot_id, vote_id, state, attempts_made, next_attempt_at, completed_at, created_at, updated_at)
     SELECT gen_random_uuid(), bot_id, id, 'delivered', 1, voted_at, voted_at, voted_at, voted_at FROM v
     RETURNING id`,
    [botId, count],
  );
  return rows.map((r) => r.id);
}

const someIds = (n: number) => Array.from({ length: n }, () => crypto.randomUUID());

describe("the by-id functions on a fresh install's empty, unanalysed webhook_deliveries", () => {
  it("when the table has never been analysed, then PostgreSQL knows nothing of its size (the case under test)", async () => {
    const { rows } = await t.db.pool.query<{ reltuples: number; rows: string }>(
      `SELECT c.reltuples, (SELECT count(*) FROM webhook_deliveries)::text AS rows
         FROM pg_class c WHERE c.oid = 'webhook_deliveries'::regclass`,
    );
    expect(rows[0]).toEqual({ reltuples: -1, rows: "0" });
  });

  it("when the session asks for generic plans, then no statement of the functions scans webhook_deliveries", async () => {
    const plans = await nestedPlans(t.db.pool, async (client) => {
      await client.query("SET LOCAL plan_cache_mode = force_generic_plan");
      // A batch of two: a plan made for these ids rightly reads a table this small (empty, assumed
      // ten pages) sequentially once the batch is long; a generic plan, made for no ids, scans
      // it for any batch.
      await everyCall(client, someIds(2));
    });
    // The five calls' statements were all planned (lock, read and write steps, the redelivery).
    expect(plans.filter((p) => /webhook_deliveries/.test(p["Query Text"])).length).toBeGreaterThanOrEqual(5);
    expect(deliverySeqScans(plans)).toEqual([]);
  });

  it("when a session called them while the table was empty and it has grown since, then they reach the rows by the primary key", async () => {
    const plans = await nestedPlans(t.db.pool, async (client) => {
      // Enough calls for PostgreSQL to settle on a generic plan if it is allowed to.
      for (let i = 0; i < 8; i++) await everyCall(client, someIds(12));
      // (auto_explain off meanwhile: it would report each vote's foreign-key checks.)
      await client.query("SET LOCAL auto_explain.log_min_duration = -1");
      const ids = await insertDeliveries(client, 10_000);
      await client.query("SET LOCAL auto_explain.log_min_duration = 0");
      await client.query("SELECT 'grown' AS marker");
      await everyCall(client, ids.slice(0, 12));
    });
    const grown = plans.findIndex((p) => p["Query Text"].includes("'grown' AS marker"));
    expect(grown).toBeGreaterThan(0);
    const after = plans.slice(grown + 1);
    expect(after.length).toBeGreaterThanOrEqual(5);
    expect(deliverySeqScans(after)).toEqual([]);
  });
});
