/**
 * `BENCH_ROWS=1 pnpm bench`: what PostgreSQL spends writing one delivered vote's rows, with random
 * (version 4) delivery ids against time-ordered (version 7, what vote-ingest makes) ones, in the
 * same run. Two scratch databases migrated to the current schema hold the same history
 * (BENCH_ROWS_HISTORY delivered deliveries with an attempt each, default 2,000,000, ids of the
 * database's kind); then rounds alternate between them (v4, v7, v4, v7 …). Each round writes
 * BENCH_ROWS_VOTES votes (default 10,000) with their deliveries and hand-off marks in batches of 20,
 * as vote-ingest's statements do, then delivers them in batches of 20, batch by batch in turn: one
 * batch through the dispatcher's functions (botdir_claim_deliveries, then botdir_record_attempts),
 * the next through **the floor**: one statement writing only what a delivered attempt must leave
 * (the delivery's outcome and its attempt row, no lease, no checks). Each kind of statement runs
 * on its own connection, so its backend's CPU (/proc) is that statement's alone. Nothing else
 * runs: no HTTP, no Redis. Writes bench/results/rows-<date>.json.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { migrate, newDeliveryId } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import pg from "pg";
import { median } from "./pipeline.js";
import { cpuSeconds, ROOT } from "./procs.js";
import { botId } from "./stack.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const HISTORY = Number(process.env.BENCH_ROWS_HISTORY ?? 2_000_000);
const VOTES = Number(process.env.BENCH_ROWS_VOTES ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const BATCH = 20;
const BOTS = 50;
const KINDS = ["v4", "v7"] as const;
type Kind = (typeof KINDS)[number];
const log = (line: string) => process.stdout.write(`[rows] ${line}\n`);

/** A version 7 UUID of the time in `column`, made in SQL for the seeded history. */
const v7Sql = (
  column: string,
) => `(lpad(to_hex((extract(epoch FROM ${column}) * 1000)::bigint), 12, '0') || '7'
  || substr(md5(random()::text), 1, 3) || to_hex(8 + floor(random() * 4)::int)
  || substr(md5(random()::text), 1, 15))::uuid`;

interface Sessions {
  ingest: pg.Client;
  claim: pg.Client;
  record: pg.Client;
  floor: pg.Client;
  pids: Record<"ingest" | "claim" | "record" | "floor", number>;
  nextUser: bigint;
}

async function connect(url: string): Promise<[pg.Client, number]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
  return [client, rows[0]?.pid ?? 0];
}

async function seed(url: string, kind: Kind): Promise<void> {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  await db.query(
    `INSERT INTO bots (id, status, token_hash, webhook_url, webhook_secret_encrypted, approved_at)
     SELECT (100000000000000000 + i)::text, 'approved', lpad(to_hex(i), 64, '0'), 'https://example.com/hook', 'x', now()
       FROM generate_series(0, ${BOTS - 1}) i`,
  );
  await db.query(
    `INSERT INTO vote_log (id, bot_id, user_id, voted_at)
     SELECT nextval('vote_log_id_seq'), (100000000000000000 + g % ${BOTS})::text,
            (20000000000000000000::numeric + g)::text, now() - interval '2 days' + g * interval '50 ms'
       FROM generate_series(1, $1::int) g`,
    [HISTORY],
  );
  const id = kind === "v7" ? v7Sql("voted_at") : "gen_random_uuid()";
  await db.query(
    `INSERT INTO webhook_deliveries (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at,
                                     updated_at, completed_at, handed_off_at)
     SELECT ${id}, bot_id, id, 'delivered', 1, voted_at, voted_at, voted_at, voted_at, voted_at FROM vote_log`,
  );
  await db.query(
    `INSERT INTO webhook_attempts (delivery_id, series, bot_id, attempt_number, status_code, duration_ms, attempted_at)
     SELECT id, 0, bot_id, 1, 200, 10, completed_at FROM webhook_deliveries`,
  );
  await db.query("VACUUM ANALYZE");
  await db.end();
}

/** One round: VOTES votes written, handed off, claimed and recorded; CPU µs per delivery. */
async function round(
  s: Sessions,
  kind: Kind,
): Promise<Record<"recording" | "claim" | "record" | "floor", number>> {
  const made: { id: string; bot: string }[] = [];
  const ingestBefore = cpuSeconds(s.pids.ingest);
  for (let k = 0; k < VOTES; k += BATCH) {
    const bots: string[] = [];
    const users: string[] = [];
    const ids: string[] = [];
    for (let j = 0; j < BATCH; j++) {
      bots.push(botId((k + j) % BOTS));
      users.push(String(s.nextUser++));
      ids.push(kind === "v7" ? newDeliveryId() : randomUUID());
    }
    await s.ingest.query({
      name: "cast",
      text: `WITH input AS (SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::uuid[]) WITH ORDINALITY t(bot_id, user_id, did, i)),
        nv AS (SELECT i, nextval('vote_log_id_seq') AS id FROM input),
        lg AS (INSERT INTO vote_log (id, bot_id, user_id, voted_at)
               SELECT nv.id, input.bot_id, input.user_id, now() FROM input JOIN nv USING (i) RETURNING id)
        INSERT INTO webhook_deliveries (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at, updated_at)
        SELECT input.did, input.bot_id, nv.id, 'pending', 0, now(), now(), now()
          FROM input JOIN nv USING (i) JOIN lg ON lg.id = nv.id`,
      values: [bots, users, ids],
    });
    await s.ingest.query({
      name: "mark",
      text: "UPDATE webhook_deliveries SET handed_off_at = now() WHERE id = ANY($1::uuid[])",
      values: [ids],
    });
    made.push(...ids.map((id, j) => ({ id, bot: bots[j] ?? "" })));
  }
  const claimBefore = cpuSeconds(s.pids.claim);
  const recordBefore = cpuSeconds(s.pids.record);
  const floorBefore = cpuSeconds(s.pids.floor);
  const ingestAfter = cpuSeconds(s.pids.ingest);
  let ours = 0;
  for (let k = 0; k < made.length; k += BATCH) {
    const part = made.slice(k, k + BATCH);
    const now = new Date();
    if ((k / BATCH) % 2 === 1) {
      const written = await s.floor.query({
        name: "floor",
        text: `WITH d AS (
                 UPDATE webhook_deliveries w
                    SET state = 'delivered', attempts_made = 1, completed_at = $2, updated_at = $2
                   FROM unnest($1::uuid[]) AS q(id)
                  WHERE w.id = q.id
              RETURNING w.id, w.bot_id)
               INSERT INTO webhook_attempts (delivery_id, series, bot_id, attempt_number, status_code, duration_ms, attempted_at)
               SELECT d.id, 0, d.bot_id, 1, 200, 12, $2 FROM d`,
        values: [part.map((p) => p.id), now],
      });
      if (written.rowCount !== part.length) throw new Error("the floor did not write every delivery");
      continue;
    }
    ours += part.length;
    const lease = new Date(now.getTime() + 30_000);
    const claimed = await s.claim.query<{ claimed_attempt: number | null }>({
      name: "claim",
      text: "SELECT claimed_attempt FROM botdir_claim_deliveries($1::uuid[], false, $2, $3, $4, 5)",
      values: [part.map((p) => p.id), lease, now, now],
    });
    if (claimed.rows.some((r) => r.claimed_attempt !== 1)) throw new Error("a delivery was not claimed");
    const each = <T>(value: T) => part.map(() => value);
    const recorded = await s.record.query<{ recorded: boolean }>({
      name: "record",
      text: `SELECT recorded FROM botdir_record_attempts(false, $1::uuid[], $2::int[], $3::timestamptz[], $4::text[],
               $5::timestamptz[], $6::timestamptz[], $7::timestamptz[], $8::varchar[], $9::int[], $10::text[],
               $11::int[], $12::timestamptz[])`,
      values: [
        part.map((p) => p.id),
        each(1),
        each(lease),
        each("delivered"),
        each(null),
        each(now),
        each(now),
        part.map((p) => p.bot),
        each(200),
        each(null),
        each(12),
        each(now),
      ],
    });
    if (recorded.rows.some((r) => !r.recorded)) throw new Error("an attempt was not recorded");
  }
  const per = (seconds: number, n: number) => Math.round((seconds / n) * 1e7) / 10;
  return {
    recording: per(ingestAfter - ingestBefore, made.length),
    claim: per(cpuSeconds(s.pids.claim) - claimBefore, ours),
    record: per(cpuSeconds(s.pids.record) - recordBefore, ours),
    floor: per(cpuSeconds(s.pids.floor) - floorBefore, made.length - ours),
  };
}

const stamp = Date.now().toString(36);
const admin = new pg.Client({ connectionString: BASE_DB });
await admin.connect();
const urls = {} as Record<Kind, string>;
const sessions = {} as Record<Kind, Sessions>;
const rounds: { kind: Kind; recording: number; claim: number; record: number; floor: number }[] = [];
try {
  for (const kind of KINDS) {
    const name = `botdir_rows_${stamp}_${kind}`;
    await admin.query(`CREATE DATABASE ${name}`);
    urls[kind] = withDatabase(BASE_DB, name);
    await migrate(urls[kind]);
    const started = Date.now();
    await seed(urls[kind], kind);
    log(
      `${kind}: seeded ${HISTORY.toLocaleString("en")} delivered deliveries in ${Math.round((Date.now() - started) / 1000)} s`,
    );
    const [ingest, ingestPid] = await connect(urls[kind]);
    const [claim, claimPid] = await connect(urls[kind]);
    const [record, recordPid] = await connect(urls[kind]);
    const [floor, floorPid] = await connect(urls[kind]);
    sessions[kind] = {
      ingest,
      claim,
      record,
      floor,
      pids: { ingest: ingestPid, claim: claimPid, record: recordPid, floor: floorPid },
      nextUser: 10000000000000000000n,
    };
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const kind of KINDS) {
      const result = await round(sessions[kind], kind);
      rounds.push({ kind, ...result });
      log(
        `round ${r + 1} ${kind}: CPU µs per delivery: recording ${result.recording}, claim ${result.claim}, record ${result.record}; the floor ${result.floor}`,
      );
    }
  }
} finally {
  for (const kind of KINDS) {
    const s = sessions[kind];
    if (s) await Promise.all([s.ingest.end(), s.claim.end(), s.record.end(), s.floor.end()]);
    if (urls[kind]) await admin.query(`DROP DATABASE IF EXISTS botdir_rows_${stamp}_${kind}`);
  }
  await admin.end();
}

const summary = Object.fromEntries(
  KINDS.map((kind) => {
    const mine = rounds.filter((r) => r.kind === kind);
    const of = (pick: (r: (typeof mine)[number]) => number) => median(mine.map(pick));
    return [
      kind,
      {
        recording: of((r) => r.recording),
        claim: of((r) => r.claim),
        record: of((r) => r.record),
        delivery: of((r) => r.claim + r.record),
        floor: of((r) => r.floor),
      },
    ];
  }),
) as Record<Kind, { recording: number; claim: number; record: number; delivery: number; floor: number }>;
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
log(
  `medians, CPU µs per delivery, v4 → v7: recording ${summary.v4.recording} → ${summary.v7.recording} (${ratio(summary.v7.recording, summary.v4.recording)}×), ` +
    `claim + record ${summary.v4.delivery} → ${summary.v7.delivery} (${ratio(summary.v7.delivery, summary.v4.delivery)}×); ` +
    `the floor (outcome and attempt row only) ${summary.v4.floor} → ${summary.v7.floor}: ` +
    `claim + record ${ratio(summary.v7.delivery, summary.v7.floor)}× the floor (v7)`,
);
const date = new Date().toISOString();
const dir = path.join(ROOT, "bench/results");
mkdirSync(dir, { recursive: true });
const file = path.join(dir, `rows-${date.slice(0, 10)}.json`);
writeFileSync(
  file,
  `${JSON.stringify({ date, history: HISTORY, votesPerRound: VOTES, batch: BATCH, rounds, summary }, null, 2)}\n`,
);
log(`results: ${path.relative(ROOT, file)}`);
