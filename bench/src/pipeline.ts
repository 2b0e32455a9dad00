/**
 * What the whole-pipeline scenarios (src/scenarios/mix.ts and hostile.ts: ingest → outbox → queue
 * → dispatcher → receiver, every app on this box) share: their bots, the delivery history seeded
 * before `ANALYZE`, and percentiles.
 */
import { randomBytes } from "node:crypto";
import { hashToken } from "@botdir/db";
import type pg from "pg";
import type { Receiver } from "./receiver.js";

export const MIX_PATH = "/mix";
export const HOSTILE_OK_PATH = "/hostile-ok";
/** Where the dispatcher's floor (src/sender-floor.ts) sends: the mix bots' origins, another path. */
export const SENDER_FLOOR_PATH = "/sender-floor";

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

export const median = (xs: number[]) => percentile(xs, 50);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Approved bots `ids` with a fresh token each (server count 1), in one statement: their ids and tokens. */
export async function insertTokenBots(
  client: pg.Client,
  ids: string[],
): Promise<{ id: string; token: string }[]> {
  const bots = ids.map((id) => ({ id, token: randomBytes(32).toString("base64url") }));
  await client.query(
    `INSERT INTO bots (id, status, token_hash, approved_at, server_count)
     SELECT id, 'approved', hash, now(), 1 FROM unnest($1::text[], $2::text[]) AS t(id, hash)`,
    [bots.map((b) => b.id), bots.map((b) => hashToken(b.token))],
  );
  return bots;
}

/** Bots of the two scenarios, inserted in one statement each. */
export async function seedPipelineBots(
  client: pg.Client,
  encrypt: (secret: string) => string,
  receiver: Receiver,
  ids: { mix: string[]; hostile: string[] },
): Promise<{ hostileHealthy: Set<string> }> {
  const insert = (rows: { id: string; url: string }[]) =>
    client.query(
      `INSERT INTO bots (id, status, approved_at, webhook_url, webhook_secret_encrypted)
       SELECT id, 'approved', now(), url, secret FROM unnest($1::text[], $2::text[], $3::text[]) AS t(id, url, secret)`,
      [
        rows.map((r) => r.id),
        rows.map((r) => r.url),
        rows.map((r, i) => encrypt(`whsec_bench_${r.id}_${i}`)),
      ],
    );
  await insert(ids.mix.map((id, i) => ({ id, url: receiver.url(MIX_PATH, i) })));
  const hostileHealthy = new Set<string>();
  await insert(
    ids.hostile.map((id, i) => {
      const kind = i % 20; // 2 of 20 hold, 2 of 20 fail, 1 of 20 does not resolve, 15 of 20 healthy
      if (kind < 2) return { id, url: receiver.url(`/hold/${i}`, i) };
      if (kind < 4) return { id, url: receiver.url(`/fail/${i}`, i) };
      if (kind < 5) return { id, url: `http://bot-${i}.invalid/hook` };
      hostileHealthy.add(id);
      return { id, url: receiver.url(HOSTILE_OK_PATH, i) };
    }),
  );
  return { hostileHealthy };
}

/**
 * A live directory's delivery history: `perBot` past votes of each of `bots`, each with a delivery
 * delivered by its first attempt, a day or more ago (user ids in a range no scenario casts or
 * counts: they sort below every scenario's). Without it `webhook_deliveries` and `webhook_attempts`
 * start empty, and the `ANALYZE` after seeding tells the planner they are empty: with autovacuum
 * off (this machine's and CI's PostgreSQL) that stays true for the whole run, and plans made on it
 * are cached per connection for its life (the foreign-key check of every attempt row a record
 * statement inserts was measured at 4 µs or 112–285 µs per row from one run to the next).
 */
export async function seedDeliveryHistory(
  client: pg.Client,
  bots: string[],
  perBot: number,
): Promise<number> {
  await client.query(
    `WITH v AS (
       INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT b.id, (1000000000000000000 + g)::text,
              now() - interval '1 day' - (g || ' minutes')::interval
         FROM unnest($1::text[]) AS b(id), generate_series(1, $2::int) g
       RETURNING id, bot_id, voted_at
     ), d AS (
       INSERT INTO webhook_deliveries
              (id, bot_id, vote_id, state, attempts_made, next_attempt_at, handed_off_at,
               created_at, updated_at, completed_at, series)
       SELECT gen_random_uuid(), v.bot_id, v.id, 'delivered', 1, v.voted_at, v.voted_at,
              v.voted_at, v.voted_at + interval '40 milliseconds', v.voted_at + interval '40 milliseconds', 0
         FROM v
       RETURNING id, bot_id, created_at
     )
     INSERT INTO webhook_attempts
            (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
     SELECT d.id, 0, d.bot_id, 1, 200, NULL, 30, d.created_at + interval '5 milliseconds' FROM d`,
    [bots, perBot],
  );
  return bots.length * perBot;
}
