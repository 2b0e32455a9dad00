/**
 * Recovering a bot's undelivered votes (docs/webhooks.md "Recovering undelivered votes"): the SQL
 * shared by the public API, vote-ingest's internal endpoint and botctl (start, read) and by
 * vote-ingest's recovery driver (step). Migration 20261128100000_webhook_recovery.
 *
 * A recovery sends `vote.create` again for every vote in its window whose delivery did not succeed
 * when it started: a delivery that ended `failed` (five attempts, or `endpoint_disabled`), and a
 * vote with no delivery at all (recorded while the webhook was disabled). A delivered vote is not
 * sent again; a pending one is left to its own attempts. Starting one writes one row; the driver
 * then queues its votes in keyset batches, at most `maxInFlight` of them pending at a time.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { type Db, inTransaction } from "./client.js";
import { isUuid, newDeliveryId } from "./deliveries.js";
import { toIso, toIsoOrNull } from "./time.js";

/**
 * How far back a recovery may reach: 14 days. Recovery tells "not delivered" from "delivered" by the
 * delivery rows, and final deliveries are pruned after WEBHOOK_RETENTION_DAYS (30 by default): a
 * window reaching past retention would send votes again that were delivered. 14 days covers the
 * 5 days after which a failing webhook is disabled plus more than a week to notice, with room
 * under retention.
 */
export const RECOVERY_MAX_AGE_MS = 14 * 24 * 60 * 60 * 1000;

export type RecoveryStateName = "running" | "done" | "stopped";

/** What an owner sees of a recovery. */
export interface RecoveryView {
  recoveryId: string;
  state: RecoveryStateName;
  since: string;
  until: string;
  /** Votes the recovery sends (counted when it started; what was queued once it ended). */
  queued: number;
  delivered: number;
  failed: number;
  /** Not delivered or failed yet: pending in the dispatcher, or not queued yet. */
  pending: number;
  createdAt: string;
  finishedAt: string | null;
}

export type StartRecoveryResult =
  | { kind: "started"; recoveryId: string; queued: number }
  /** The bot has no webhook URL. */
  | { kind: "no_webhook" }
  /** The webhook is disabled: enable it first, or nothing could be delivered. */
  | { kind: "disabled" }
  /** A recovery of this bot over an overlapping window is still running. */
  | { kind: "running"; recoveryId: string };

const CANDIDATES_WHERE = `v.bot_id = $1 AND v.voted_at >= $2::timestamptz AND v.voted_at < $3::timestamptz`;

/**
 * Starts a recovery of `botId`'s votes in [since, until): one short transaction under the bot's
 * row lock (two concurrent starts cannot both pass the overlap check). The count is one read of
 * the window through vote_log's (bot_id, voted_at) index and the deliveries' vote_id index.
 */
export async function startRecovery(
  db: Db,
  botId: string,
  window: { since: Date; until: Date },
  now: Date,
  traceparent: string | null,
): Promise<StartRecoveryResult> {
  return inTransaction(db, async (client) => {
    const bot = await client.query<{ has_webhook: boolean; takes_votes: boolean; disabled: boolean }>(
      `SELECT webhook_url IS NOT NULL AND webhook_secret_encrypted IS NOT NULL AS has_webhook,
              'vote.create' = ANY(webhook_events) AS takes_votes,
              webhook_disabled_at IS NOT NULL AS disabled
         FROM bots WHERE id = $1 FOR NO KEY UPDATE`,
      [botId],
    );
    const row = bot.rows[0];
    let result: StartRecoveryResult;
    if (!row?.has_webhook) result = { kind: "no_webhook" };
    else if (row.disabled) result = { kind: "disabled" };
    else {
      const running = await client.query<{ id: string }>(
        `SELECT id FROM webhook_recoveries
          WHERE bot_id = $1 AND state = 'running' AND since < $3::timestamptz AND until > $2::timestamptz
          ORDER BY created_at LIMIT 1`,
        [botId, window.since, window.until],
      );
      const other = running.rows[0];
      if (other) result = { kind: "running", recoveryId: other.id };
      else if (!row.takes_votes) {
        // A webhook not subscribed to vote.create receives none: a recovery with nothing to send.
        result = {
          kind: "started",
          recoveryId: await insertRecovery(client, botId, window, 0, now, traceparent),
          queued: 0,
        };
      } else {
        const counted = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM vote_log v LEFT JOIN webhook_deliveries d ON d.vote_id = v.id AND d.event = 'vote.create'
            WHERE ${CANDIDATES_WHERE} AND (d.id IS NULL OR d.state = 'failed')`,
          [botId, window.since, window.until],
        );
        const total = counted.rows[0]?.n ?? 0;
        const recoveryId = await insertRecovery(client, botId, window, total, now, traceparent);
        result = { kind: "started", recoveryId, queued: total };
      }
    }
    return result;
  });
}

/** One recovery of `botId` with its counts, or null (unknown, another bot's, not a UUID). */
export async function getRecovery(db: Db, botId: string, recoveryId: string): Promise<RecoveryView | null> {
  if (!isUuid(recoveryId)) return null;
  const { rows } = await db.pool.query<{
    id: string;
    state: RecoveryStateName;
    since: Date;
    until: Date;
    total: number;
    delivered: number;
    failed: number;
    created_at: Date;
    finished_at: Date | null;
  }>(
    `SELECT r.id, r.state, r.since, r.until, r.total, r.created_at, r.finished_at,
            (SELECT count(*)::int FROM webhook_deliveries d
              WHERE d.recovery_id = r.id AND d.state = 'delivered') AS delivered,
            (SELECT count(*)::int FROM webhook_deliveries d
              WHERE d.recovery_id = r.id AND d.state = 'failed') AS failed
       FROM webhook_recoveries r WHERE r.id = $1 AND r.bot_id = $2`,
    [recoveryId, botId],
  );
  const row = rows[0];
  if (!row) return null;
  return {
    recoveryId: row.id,
    state: row.state,
    since: toIso(row.since),
    until: toIso(row.until),
    queued: row.total,
    delivered: row.delivered,
    failed: row.failed,
    pending: Math.max(0, row.total - row.delivered - row.failed),
    createdAt: toIso(row.created_at),
    finishedAt: toIsoOrNull(row.finished_at),
  };
}

/** The running recoveries, oldest first (the driver's work list). */
export async function runningRecoveries(db: Db, limit = 100): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>(
    "SELECT id FROM webhook_recoveries WHERE state = 'running' ORDER BY created_at LIMIT $1",
    [limit],
  );
  return rows.map((r) => r.id);
}

/** A delivery a step made pending, for the queue (jobId = its id). */
export interface RecoveredDelivery {
  id: string;
  botId: string;
  attemptsMade: number;
  nextAttemptAt: Date;
  traceparent?: string;
}

export type RecoveryStep =
  /** Another replica holds the recovery, or it is not running any more. */
  | { kind: "idle" }
  /** Enough of its deliveries are pending; or every vote is queued and some still are. */
  | { kind: "waiting" }
  | { kind: "done" }
  /** The webhook was disabled or removed: the recovery ends without its remaining votes. */
  | { kind: "stopped" }
  /** One keyset batch was looked at; `deliveries` were made pending (hand them to the queue). */
  | { kind: "queued"; botId: string; deliveries: RecoveredDelivery[] };

export interface RecoveryStepOptions {
  /** Votes looked at per step (one keyset batch, one short transaction). */
  batchSize: number;
  /** Pending deliveries of one recovery at most: the next batch waits below it. */
  maxInFlight: number;
  /**
   * The recovery's pace, over all the replicas that drive it: at most this many deliveries queued
   * per second since it started, plus one second's worth (unset: no pace).
   */
  maxPerSecond?: number;
  /**
   * The new trace of one recovered delivery (its traceparent), linked to its previous trace (null
   * for a vote that had no delivery) and to the recovery's request trace.
   */
  newTrace: (previous: string | null, recovery: string | null) => Promise<string | null>;
}

interface RecoveryRow {
  id: string;
  bot_id: string;
  total: number;
  queued: number;
  scanned: boolean;
  cursor_voted_at: Date | null;
  cursor_vote_id: string | null;
  traceparent: string | null;
  created_at: Date;
  until: Date;
  since: Date;
  usable: boolean;
}

/**
 * One step of one recovery, in one short transaction holding the recovery's row (SKIP LOCKED: any
 * number of vote-ingest replicas can drive recoveries): ends it when it is over, waits while
 * `maxInFlight` of its deliveries are pending, or looks at the next `batchSize` votes of its window
 * from the cursor and makes the undelivered ones pending (a failed delivery starts a new series,
 * same delivery id; a vote without one gets a new delivery). The cursor moves in the same
 * transaction, so a crash anywhere repeats at most a step that was rolled back.
 */
export async function stepRecovery(
  db: Db,
  recoveryId: string,
  now: Date,
  options: RecoveryStepOptions,
): Promise<RecoveryStep> {
  return inTransaction(db, async (client) => {
    const locked = await client.query<RecoveryRow>(
      `SELECT r.id, r.bot_id, r.total, r.queued, r.scanned, r.cursor_voted_at, r.cursor_vote_id::text,
              r.traceparent, r.created_at, r.since, r.until,
              b.webhook_url IS NOT NULL AND b.webhook_secret_encrypted IS NOT NULL
                AND b.webhook_disabled_at IS NULL AND 'vote.create' = ANY(b.webhook_events) AS usable
         FROM webhook_recoveries r JOIN bots b ON b.id = r.bot_id
        WHERE r.id = $1 AND r.state = 'running'
          FOR UPDATE OF r SKIP LOCKED`,
      [recoveryId],
    );
    const r = locked.rows[0];
    return r ? stepLocked(client, r, now, options) : ({ kind: "idle" } as const);
  });
}

type Client = pg.PoolClient;

/** Writes a recovery's row; with nothing to send it is done at once. Returns its id. */
async function insertRecovery(
  client: Client,
  botId: string,
  window: { since: Date; until: Date },
  total: number,
  now: Date,
  traceparent: string | null,
): Promise<string> {
  const recoveryId = randomUUID();
  await client.query(
    `INSERT INTO webhook_recoveries
            (id, bot_id, since, until, state, total, scanned, traceparent, created_at, updated_at, finished_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10)`,
    [
      recoveryId,
      botId,
      window.since,
      window.until,
      total === 0 ? "done" : "running",
      total,
      total === 0,
      traceparent,
      now,
      total === 0 ? now : null,
    ],
  );
  return recoveryId;
}

async function finish(client: Client, r: RecoveryRow, state: "done" | "stopped", now: Date): Promise<void> {
  await client.query(
    `UPDATE webhook_recoveries SET state = $2, total = queued, finished_at = $3, updated_at = $3 WHERE id = $1`,
    [r.id, state, now],
  );
}

async function stepLocked(
  client: Client,
  r: RecoveryRow,
  now: Date,
  options: RecoveryStepOptions,
): Promise<RecoveryStep> {
  if (!r.usable) {
    await finish(client, r, "stopped", now);
    return { kind: "stopped" };
  }
  const pending = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM webhook_deliveries WHERE recovery_id = $1 AND state = 'pending'`,
    [r.id],
  );
  const inFlight = pending.rows[0]?.n ?? 0;
  if (r.scanned) {
    if (inFlight > 0) return { kind: "waiting" };
    await finish(client, r, "done", now);
    return { kind: "done" };
  }
  if (inFlight >= options.maxInFlight) return { kind: "waiting" };
  // The pace: the row's count of queued deliveries against the time since the recovery started
  // (read under the row's lock, so every replica keeps the same pace).
  let batchSize = options.batchSize;
  if (options.maxPerSecond !== undefined) {
    const seconds = Math.max(0, (now.getTime() - r.created_at.getTime()) / 1000);
    const allowed = Math.floor((seconds + 1) * options.maxPerSecond) - r.queued;
    if (allowed <= 0) return { kind: "waiting" };
    batchSize = Math.min(batchSize, allowed);
  }

  const batch = await client.query<{
    vote_id: string;
    voted_at: Date;
    delivery_id: string | null;
    state: string | null;
    completed_at: Date | null;
    traceparent: string | null;
  }>(
    `SELECT v.id::text AS vote_id, v.voted_at, d.id AS delivery_id, d.state, d.completed_at, d.traceparent
       FROM vote_log v LEFT JOIN webhook_deliveries d ON d.vote_id = v.id AND d.event = 'vote.create'
      WHERE ${CANDIDATES_WHERE}
        AND ($4::timestamptz IS NULL OR (v.voted_at, v.id) > ($4::timestamptz, $5::bigint))
      ORDER BY v.voted_at, v.id
      LIMIT $6`,
    [r.bot_id, r.since, r.until, r.cursor_voted_at, r.cursor_vote_id, batchSize],
  );
  const rows = batch.rows;
  // Failed before the recovery started: a delivery that failed later was pending then (left to it).
  const failed = rows.filter(
    (x) => x.delivery_id && x.state === "failed" && x.completed_at && x.completed_at <= r.created_at,
  );
  const missing = rows.filter((x) => !x.delivery_id);
  const failedIds: string[] = [];
  const failedTraces: (string | null)[] = [];
  for (const x of failed) {
    failedIds.push(x.delivery_id as string);
    failedTraces.push(await options.newTrace(x.traceparent, r.traceparent));
  }
  const newIds: string[] = [];
  const newVotes: string[] = [];
  const newTraces: (string | null)[] = [];
  for (const x of missing) {
    newIds.push(newDeliveryId(now.getTime()));
    newVotes.push(x.vote_id);
    newTraces.push(await options.newTrace(null, r.traceparent));
  }
  const made: { id: string; traceparent: string | null }[] = [];
  if (failedIds.length > 0) {
    const updated = await client.query<{ id: string; traceparent: string | null }>(
      `UPDATE webhook_deliveries w
          SET state = 'pending', series = w.series + 1, attempts_made = 0, next_attempt_at = $3,
              handed_off_at = NULL, completed_at = NULL, lease_until = NULL, attempt_started_at = NULL,
              failure_reason = NULL, updated_at = $3, traceparent = x.tp,
              recovery_id = $4, recovery_series = w.series + 1
         FROM unnest($1::uuid[], $2::varchar[]) AS x(id, tp)
        WHERE w.id = x.id AND w.state = 'failed' AND w.completed_at <= $5
        RETURNING w.id, w.traceparent`,
      [failedIds, failedTraces, now, r.id, r.created_at],
    );
    made.push(...updated.rows);
  }
  if (newIds.length > 0) {
    const inserted = await client.query<{ id: string; traceparent: string | null }>(
      `INSERT INTO webhook_deliveries
              (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at, updated_at,
               series, traceparent, recovery_id, recovery_series)
       SELECT x.id, $4, x.vote_id, 'pending', 0, $5, $5, $5, 0, x.tp, $6, 0
         FROM unnest($1::uuid[], $2::bigint[], $3::varchar[]) AS x(id, vote_id, tp)
       ON CONFLICT (vote_id, event) DO NOTHING
       RETURNING id, traceparent`,
      [newIds, newVotes, newTraces, r.bot_id, now, r.id],
    );
    made.push(...inserted.rows);
  }
  const last = rows.at(-1);
  await client.query(
    `UPDATE webhook_recoveries
        SET queued = queued + $2, scanned = $3, updated_at = $4,
            cursor_voted_at = COALESCE($5, cursor_voted_at), cursor_vote_id = COALESCE($6::bigint, cursor_vote_id)
      WHERE id = $1`,
    [r.id, made.length, rows.length < batchSize, now, last?.voted_at ?? null, last?.vote_id ?? null],
  );
  return {
    kind: "queued",
    botId: r.bot_id,
    deliveries: made.map((m) => ({
      id: m.id,
      botId: r.bot_id,
      attemptsMade: 0,
      nextAttemptAt: now,
      ...(m.traceparent ? { traceparent: m.traceparent } : {}),
    })),
  };
}

/** Marks deliveries handed to the queue (the outbox relay then leaves them to their jobs). */
export async function markHandedOff(db: Db, ids: string[], now: Date): Promise<void> {
  if (ids.length === 0) return;
  await db.pool.query(
    `UPDATE webhook_deliveries SET handed_off_at = $2
      WHERE id = ANY($1::uuid[]) AND state = 'pending' AND handed_off_at IS NULL`,
    [ids, now],
  );
}
