/**
 * Retention of the delivery tables: deliveries in a final state (`delivered`, `failed`) whose
 * completion is older than WEBHOOK_RETENTION_DAYS are deleted with their attempts, in small
 * batches, except the deliveries holding one of their bot's last ten attempts (what an owner
 * looks at when debugging a webhook). A pending delivery is never touched, whatever its age. The
 * vote log is never touched either (append-only, enforced by the database).
 *
 * Where it runs: in every dispatcher replica on a timer (WEBHOOK_RETENTION_INTERVAL_S); a run
 * first takes a PostgreSQL session advisory lock with pg_try_advisory_lock, so one replica prunes
 * at a time and the others skip that round. A run walks the final deliveries oldest first by
 * (completed_at, id) with a keyset cursor, each batch one short transaction that locks only old,
 * final rows (FOR UPDATE SKIP LOCKED: nothing hot, nothing waited for), so it never holds a row
 * the vote or delivery paths need.
 *
 * The same run deletes test events (`webhook_test_attempts`, POST …/webhook/test) older than the
 * retention, except each bot's newest ten, and vote counters of hours the widget no longer reads.
 */
import type { Db } from "@botdir/db";
import type { Clock, Logger } from "@botdir/service-kit";
import { Counter, describeError, type Registry } from "@botdir/service-kit";

/** application_name of a run's session (pg_stat_activity shows which server it is on). */
export const RETENTION_APPLICATION_NAME = "botdir-retention";
/**
 * After a run that failed (PostgreSQL unreachable, a failover in progress), the next one comes
 * after this, doubled for each failure in a row up to RETENTION_RETRY_MAX_MS (never later than the
 * interval): a run is a new session, so it follows a repointed DATABASE_DIRECT_URL within seconds
 * instead of an interval later.
 */
export const RETENTION_RETRY_MS = 1_000;
export const RETENTION_RETRY_MAX_MS = 60_000;
/** The replicas' first runs are spread over this long, starting this long after start. */
export const RETENTION_FIRST_SPREAD_MS = 60_000;

/**
 * When a replica's first run comes: 1–2 minutes after start (`random` ∈ [0, 1) spreads the
 * replicas), or 1–2 intervals when the interval is shorter than a minute, so a short interval
 * (the failover suite's 1 s) runs from the start.
 */
export function firstRetentionDelayMs(intervalMs: number, random: number): number {
  const base = Math.min(intervalMs, RETENTION_FIRST_SPREAD_MS);
  return base + Math.floor(random * base);
}

/** pg_try_advisory_lock key of the retention run (one replica at a time). */
export const RETENTION_LOCK_ID = 72_707_370;
/**
 * Vote counters (vote_counts) of hours older than this are deleted: the widget reads the last 30
 * days and an hour; two days of margin.
 */
export const VOTE_COUNTS_KEEP_DAYS = 32;
/** Each bot keeps at least this many of its newest attempts (and their deliveries). */
export const KEEP_ATTEMPTS_PER_BOT = 10;

/** The part of a pg client used here (the dispatcher reaches pg only through @botdir/db). */
interface PoolClient {
  query<R extends object = object>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

export interface RetentionOptions {
  retentionDays: number;
  /** Deliveries per batch (one transaction). */
  batchSize: number;
  /** Least pause between batches (the pause is at least the batch's own duration too). */
  pauseMs?: number;
}

export interface RetentionResult {
  /** False when another replica holds the lock (nothing was done). */
  ran: boolean;
  deliveries: number;
  attempts: number;
  /** Vote counter rows of hours the widget no longer reads. */
  voteCounts: number;
  /** Test events older than the retention (each bot keeps its newest KEEP_ATTEMPTS_PER_BOT). */
  testAttempts: number;
  batches: number;
  durationMs: number;
}

export interface RetentionMetrics {
  pruned(
    table: "webhook_deliveries" | "webhook_attempts" | "vote_counts" | "webhook_test_attempts",
    rows: number,
  ): void;
}

export function createRetentionMetrics(registry: Registry): RetentionMetrics {
  const rows = new Counter({
    name: "botdir_retention_pruned_rows_total",
    help: "Rows deleted by the delivery retention job, by table.",
    labelNames: ["table"],
    registers: [registry],
  });
  rows.inc({ table: "webhook_deliveries" }, 0);
  rows.inc({ table: "webhook_attempts" }, 0);
  rows.inc({ table: "vote_counts" }, 0);
  rows.inc({ table: "webhook_test_attempts" }, 0);
  return { pruned: (table, n) => rows.inc({ table }, n) };
}

// $1 cutoff, $2 cursor completed_at, $3 cursor id, $4 batch size, $5 attempts kept per bot.
// The cursor moves past kept deliveries too, so each row is looked at once per run.
const PICK_SQL = `
SELECT d.id, d.completed_at,
       NOT EXISTS (
         SELECT 1 FROM webhook_attempts a
          WHERE a.delivery_id = d.id
            AND a.id IN (SELECT k.id FROM webhook_attempts k
                          WHERE k.bot_id = d.bot_id
                          ORDER BY k.attempted_at DESC, k.id DESC
                          LIMIT $5)
       ) AS prunable
  FROM webhook_deliveries d
 WHERE d.state <> 'pending' AND d.completed_at < $1
   AND (d.completed_at, d.id) > ($2::timestamptz, $3::uuid)
 ORDER BY d.completed_at, d.id
 LIMIT $4
   FOR UPDATE SKIP LOCKED`;

async function pruneBatch(
  client: PoolClient,
  cutoff: Date,
  cursor: { at: Date; id: string },
  batchSize: number,
): Promise<{ seen: number; deliveries: number; attempts: number; last: { at: Date; id: string } | null }> {
  await client.query("BEGIN");
  try {
    const picked = await client.query<{ id: string; completed_at: Date; prunable: boolean }>(PICK_SQL, [
      cutoff,
      cursor.at,
      cursor.id,
      batchSize,
      KEEP_ATTEMPTS_PER_BOT,
    ]);
    const ids = picked.rows.filter((r) => r.prunable).map((r) => r.id);
    let attempts = 0;
    let deliveries = 0;
    if (ids.length > 0) {
      attempts =
        (await client.query("DELETE FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[])", [ids]))
          .rowCount ?? 0;
      deliveries =
        (
          await client.query(
            "DELETE FROM webhook_deliveries WHERE id = ANY($1::uuid[]) AND state <> 'pending'",
            [ids],
          )
        ).rowCount ?? 0;
    }
    await client.query("COMMIT");
    const tail = picked.rows.at(-1);
    return {
      seen: picked.rows.length,
      deliveries,
      attempts,
      last: tail ? { at: tail.completed_at, id: tail.id } : null,
    };
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  }
}

/**
 * One retention run: takes the advisory lock (or returns `ran: false`), prunes batch after batch
 * until no final delivery older than the cutoff is left to look at, releases the lock.
 */
export async function runRetention(
  deps: { db: Db; clock: Clock; metrics?: RetentionMetrics; shouldStop?: () => boolean },
  options: RetentionOptions,
): Promise<RetentionResult> {
  const started = Date.now();
  const cutoff = new Date(deps.clock.now().getTime() - options.retentionDays * 24 * 60 * 60 * 1000);
  // A session of its own, straight to PostgreSQL (DATABASE_DIRECT_URL): the advisory lock is held
  // across many transactions, which a transaction-pooling PgBouncer would hand to other clients.
  const client = await deps.db.connectDedicated(undefined, { applicationName: RETENTION_APPLICATION_NAME });
  const result: RetentionResult = {
    ran: false,
    deliveries: 0,
    attempts: 0,
    voteCounts: 0,
    testAttempts: 0,
    batches: 0,
    durationMs: 0,
  };
  /** Runs `sql` (deletes at most `limit` rows) until it deletes fewer, resting between batches. */
  async function deleteInBatches(
    sql: string,
    values: unknown[],
    limit: number,
    table: "vote_counts" | "webhook_test_attempts",
  ): Promise<number> {
    let total = 0;
    for (;;) {
      if (deps.shouldStop?.()) break;
      const batchStarted = Date.now();
      const deleted = (await client.query(sql, values)).rowCount ?? 0;
      result.batches++;
      total += deleted;
      deps.metrics?.pruned(table, deleted);
      if (deleted < limit) break;
      const pause = Math.max(options.pauseMs ?? 0, Date.now() - batchStarted);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
    return total;
  }
  try {
    const locked = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_lock($1) AS ok", [
      RETENTION_LOCK_ID,
    ]);
    if (!locked.rows[0]?.ok) return result;
    result.ran = true;
    try {
      let cursor = { at: new Date(0), id: "00000000-0000-0000-0000-000000000000" };
      for (;;) {
        if (deps.shouldStop?.()) break;
        const batchStarted = Date.now();
        const batch = await pruneBatch(client, cutoff, cursor, options.batchSize);
        const batchMs = Date.now() - batchStarted;
        result.batches++;
        result.deliveries += batch.deliveries;
        result.attempts += batch.attempts;
        deps.metrics?.pruned("webhook_deliveries", batch.deliveries);
        deps.metrics?.pruned("webhook_attempts", batch.attempts);
        if (!batch.last || batch.seen < options.batchSize) break;
        cursor = batch.last;
        // Rest at least as long as the batch took: the job never takes more than half of one
        // connection's time, however slow the database is at that moment.
        const pause = Math.max(options.pauseMs ?? 0, batchMs);
        if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
      }
      // Old vote counters (never the hours the widget reads, so never a hot row), then old test
      // events, each bot keeping its newest ones (the delivery log shows them).
      const countsCutoff = new Date(deps.clock.now().getTime() - VOTE_COUNTS_KEEP_DAYS * 24 * 60 * 60 * 1000);
      const countsLimit = options.batchSize * 10;
      result.voteCounts = await deleteInBatches(
        `DELETE FROM vote_counts WHERE ctid = ANY(ARRAY(
           SELECT ctid FROM vote_counts WHERE hour < $1 LIMIT $2))`,
        [countsCutoff, countsLimit],
        countsLimit,
        "vote_counts",
      );
      result.testAttempts = await deleteInBatches(
        `DELETE FROM webhook_test_attempts WHERE id = ANY(ARRAY(
           SELECT t.id FROM webhook_test_attempts t
            WHERE t.attempted_at < $1
              AND t.id NOT IN (SELECT k.id FROM webhook_test_attempts k
                                WHERE k.bot_id = t.bot_id
                                ORDER BY k.attempted_at DESC, k.id DESC
                                LIMIT $3)
            LIMIT $2))`,
        [cutoff, options.batchSize, KEEP_ATTEMPTS_PER_BOT],
        options.batchSize,
        "webhook_test_attempts",
      );
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [RETENTION_LOCK_ID]);
    }
  } finally {
    client.release();
    result.durationMs = Date.now() - started;
  }
  return result;
}

/**
 * Runs retention every `intervalMs` (first run after `firstDelayMs`), one log line per run. `stop`
 * ends the timer and waits for a run in progress to finish its current batch.
 */
export function scheduleRetention(
  deps: { db: Db; clock: Clock; logger: Logger; metrics?: RetentionMetrics },
  options: RetentionOptions & { intervalMs: number; firstDelayMs?: number; retryMs?: number },
): { stop(): Promise<void> } {
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  let failures = 0;
  const tick = () => {
    running = (async () => {
      let next = options.intervalMs;
      try {
        const result = await runRetention({ ...deps, shouldStop: () => stopped }, options);
        deps.logger.info(
          { event: result.ran ? "retention_run" : "retention_skipped", ...result },
          result.ran ? "delivery retention run" : "delivery retention: another replica holds the lock",
        );
        failures = 0;
      } catch (error) {
        next = Math.min(
          options.intervalMs,
          (options.retryMs ?? RETENTION_RETRY_MS) * 2 ** failures,
          RETENTION_RETRY_MAX_MS,
        );
        failures++;
        deps.logger.error(
          { event: "retention_failed", err: describeError(error), retryInMs: next },
          "delivery retention",
        );
      }
      if (!stopped) timer = setTimeout(tick, next).unref();
    })();
  };
  timer = setTimeout(tick, options.firstDelayMs ?? options.intervalMs).unref();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
