/**
 * The claim and record statements reach the delivery rows they write through the primary key,
 * whatever the statistics say. With the conditions written on the UPDATE's target, PostgreSQL went
 * through deliveries_pending_idx as soon as the pending rows looked few (statistics taken before a
 * backlog built up) and every claim read every due pending row: a 10,000-vote backlog cost 111 ms
 * per claim batch and halved the drain (docs/performance.md).
 */
import {
  createTestDatabase,
  nestedPlans,
  type PlanNode,
  seedBot,
  type TestDatabase,
} from "@botdir/db/testing";
import { DEAD_ENDPOINT_STATEMENTS, disableIfDead } from "../src/dead-endpoints.js";
import { STATEMENTS } from "../src/deliveries.js";
import { configureWebhook } from "./support.js";

let t: TestDatabase;
let ids: string[];

beforeAll(async () => {
  t = await createTestDatabase();
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, "https://example.com/hook", "whsec_plan");
  // Statistics of a quiet moment (everything delivered, nothing pending), then a backlog they do
  // not know about.
  await insertDeliveries(bot.id, {
    count: 2000,
    firstUser: "200000000000000000",
    age: "1 day",
    state: "delivered",
  });
  await t.db.pool.query("ANALYZE");
  ids = await insertDeliveries(bot.id, { count: 5000, firstUser: "300000000000000000", age: "1 minute" });
}, 60_000);

afterAll(async () => {
  await t.drop();
});

/**
 * `count` votes of `botId` cast `age` ago (user ids counting up from `firstUser`) and their
 * deliveries, in one statement: pending with `attemptsMade` attempts made (none by default), or
 * delivered with one when the vote was cast. Returns the deliveries' ids.
 */
async function insertDeliveries(
  botId: string,
  rows: {
    count: number;
    firstUser: string;
    age: string;
    state?: "pending" | "delivered";
    attemptsMade?: number;
  },
): Promise<string[]> {
  const state = rows.state ?? "pending";
  const attemptsMade = rows.attemptsMade ?? (state === "delivered" ? 1 : 0);
  const { rows: inserted } = await t.db.pool.query<{ id: string }>(
    `WITH v AS (
       INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT $1, ($2::bigint + g)::text, now() - $3::interval FROM generate_series(1, $4::int) g
       RETURNING id, bot_id, voted_at
     )
     INSERT INTO webhook_deliveries
            (id, bot_id, vote_id, state, attempts_made, next_attempt_at, completed_at, created_at, updated_at)
     SELECT gen_random_uuid(), bot_id, id, $5::delivery_state, $6, voted_at,
            CASE WHEN $5::delivery_state = 'pending' THEN NULL ELSE voted_at END, voted_at, voted_at FROM v
     RETURNING id`,
    [botId, rows.firstUser, rows.age, rows.count, state, attemptsMade],
  );
  return inserted.map((r) => r.id);
}

/** Every scan of webhook_deliveries in the plan, as "alias: how". */
function deliveryScans(node: PlanNode, out: string[] = []): string[] {
  if (node["Relation Name"] === "webhook_deliveries" && node["Node Type"] !== "ModifyTable") {
    out.push(`${node.Alias}: ${node["Node Type"]}${node["Index Name"] ? ` on ${node["Index Name"]}` : ""}`);
  }
  for (const child of node.Plans ?? []) deliveryScans(child, out);
  return out;
}

/**
 * Every scan of webhook_deliveries in the statements `sql` runs, as "alias: how". The statements
 * call functions (migration 20261125130000_dispatcher_lock_then_write), so the plans that matter
 * are those of the statements inside them, which auto_explain reports (nestedPlans).
 */
let prepared = 0;

async function scansOf(sql: string, args: string): Promise<string[]> {
  // A prepared statement outlives the transaction: a name of its own each time.
  const name = `plan_under_test_${++prepared}`;
  const plans = await nestedPlans(t.db.pool, async (client) => {
    await client.query(`PREPARE ${name} AS ${sql}`);
    await client.query(`EXECUTE ${name}(${args})`);
  });
  return plans.flatMap((plan) => deliveryScans(plan.Plan));
}

/**
 * How the UPDATE's target (`alias`) is reached. (The locking statement and the read of the locked
 * rows, aliased otherwise, are planned with each call's ids: packages/db/test/by-id-plans.test.ts.)
 */
const targetOf = (scans: string[], alias: string) => scans.filter((s) => s.startsWith(`${alias}: `));

describe("plans with a backlog the statistics do not know", () => {
  it("when 50 deliveries are claimed in one statement, then every delivery row is reached by its primary key", async () => {
    const batch = `'{${ids.slice(0, 50).join(",")}}'::uuid[]`;
    const scans = await scansOf(
      STATEMENTS.CLAIM_BATCH_SQL,
      `${batch}, now() + interval '1 minute', now(), now(), 5`,
    );
    expect(targetOf(scans, "w")).toEqual(["w: Index Scan on webhook_deliveries_pkey"]);
  });

  it("when one delivery is claimed, then its row is reached by its primary key", async () => {
    const scans = await scansOf(
      STATEMENTS.CLAIM_SQL,
      `'${ids[0]}'::uuid, now() + interval '1 minute', now(), now(), 5`,
    );
    expect(targetOf(scans, "w")).toEqual(["w: Index Scan on webhook_deliveries_pkey"]);
  });

  it("when 50 attempts are recorded in one statement, then every delivery row is reached by its primary key", async () => {
    const n = 50;
    const list = (value: string) => `ARRAY[${Array.from({ length: n }, () => value).join(",")}]`;
    const args = [
      `'{${ids.slice(0, n).join(",")}}'::uuid[]`,
      `${list("1")}::int[]`,
      `${list("now()")}::timestamptz[]`,
      `${list("'delivered'")}::text[]`,
      `${list("NULL")}::timestamptz[]`,
      `${list("now()")}::timestamptz[]`,
      `${list("now()")}::timestamptz[]`,
      `${list("'1'")}::varchar[]`,
      `${list("200")}::int[]`,
      `${list("NULL")}::text[]`,
      `${list("5")}::int[]`,
      `${list("now()")}::timestamptz[]`,
    ].join(", ");
    const scans = await scansOf(STATEMENTS.RECORD_BATCH_SQL, args);
    expect(targetOf(scans, "d")).toEqual(["d: Index Scan on webhook_deliveries_pkey"]);
  });

  it("when one attempt is recorded, then its delivery row is reached by its primary key", async () => {
    const args = `'${ids[0]}'::uuid, 1, now(), 'delivered', NULL, now(), now(), '1', 200, NULL, 5, now()`;
    const scans = await scansOf(STATEMENTS.RECORD_SQL, args);
    expect(targetOf(scans, "d")).toEqual(["d: Index Scan on webhook_deliveries_pkey"]);
  });
});

interface AnalyzedNode extends PlanNode {
  "Actual Rows": number;
  "Actual Loops": number;
  Plans?: AnalyzedNode[];
}

/** Rows each scan of webhook_attempts returned (summed over its loops), as "how: rows". */
function attemptScans(node: AnalyzedNode, out: string[] = []): string[] {
  if (node["Relation Name"] === "webhook_attempts") {
    const how = `${node["Node Type"]}${node["Index Name"] ? ` on ${node["Index Name"]}` : ""}`;
    out.push(`${how}: ${node["Actual Rows"] * node["Actual Loops"]}`);
  }
  for (const child of node.Plans ?? []) attemptScans(child, out);
  return out;
}

describe("the dead-endpoint check during a burst of failures", () => {
  const DAY = 24 * 60 * 60 * 1000;
  const rules = { afterMs: 5 * DAY, minDeliveries: 5 };
  let botId: string;

  beforeAll(async () => {
    const bot = await seedBot(t.db);
    botId = bot.id;
    await configureWebhook(t.db, bot.id, "https://example.com/down", "whsec_burst");
    // An endpoint down for the last hour of a popular bot: 3,000 failed attempts, none older.
    const failing = await insertDeliveries(botId, {
      count: 600,
      firstUser: "400000000000000000",
      age: "1 hour",
      attemptsMade: 5,
    });
    await t.db.pool.query(
      `INSERT INTO webhook_attempts
              (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
       SELECT d.id, 0, d.bot_id, n, 500, 'http_status', 3, d.created_at + n * interval '1 minute'
         FROM webhook_deliveries d, generate_series(1, 5) n
        WHERE d.id = ANY($1::uuid[])`,
      [failing],
    );
    await t.db.pool.query("ANALYZE webhook_attempts");
  });

  it("when a failing endpoint has failed for less than the window, then the check reads at most one attempt row, not the streak", async () => {
    const client = await t.db.pool.connect();
    try {
      const { rows } = await client.query<{ "QUERY PLAN": { Plan: AnalyzedNode }[] }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) ${DEAD_ENDPOINT_STATEMENTS.GATE_SQL.replace("$1", "$1::varchar").replace("$2", "$2::timestamptz")}`,
        [botId, new Date(Date.now() - rules.afterMs)],
      );
      const scans = attemptScans(rows[0]?.["QUERY PLAN"][0]?.Plan as AnalyzedNode);
      expect(scans).toEqual(["Index Scan on webhook_attempts_bot_newest_idx: 0"]);
    } finally {
      client.release();
    }
    // And disableIfDead sends only that probe to PostgreSQL (the streak statement is the O(n) one).
    const sent: string[] = [];
    const pool = t.db.pool;
    const query = pool.query;
    const forward = query as unknown as (this: typeof pool, ...args: unknown[]) => unknown;
    pool.query = ((config: { name?: string }, ...rest: unknown[]) => {
      sent.push(config.name ?? "unnamed");
      return forward.call(pool, config, ...rest);
    }) as unknown as typeof pool.query;
    try {
      expect(await disableIfDead(t.db, botId, new Date(), rules)).toEqual({
        disabled: false,
        endedDeliveries: 0,
      });
    } finally {
      pool.query = query;
    }
    expect(sent).toEqual(["dispatcher_dead_endpoint_gate"]);
  });

  it("when the same streak has lasted the whole window, then the check reads it and disables the webhook", async () => {
    const later = new Date(Date.now() + rules.afterMs);
    expect(await disableIfDead(t.db, botId, later, rules)).toEqual({ disabled: true, endedDeliveries: 600 });
  });
});
