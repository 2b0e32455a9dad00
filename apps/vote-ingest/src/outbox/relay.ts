/**
 * The transactional outbox relay: hands pending webhook deliveries from PostgreSQL to BullMQ.
 *
 * It picks up (a) deliveries never handed off: the after-commit add failed (e.g. Redis was down),
 * or a redelivery (series > 0, started by the API with no hand-off of its own, taken at once),
 * and (b) deliveries due more than `staleMs` ago that made no progress since (the job was lost,
 * e.g. Redis restarted empty). Rows are claimed with FOR UPDATE SKIP LOCKED, so any number of
 * vote-ingest replicas can run it; adding a job whose id already exists is a no-op, so a double
 * hand-off is harmless. While Redis is unavailable a tick does nothing (one log line per outage).
 */
import type { Db } from "@botdir/db";
import { type Clock, describeError, type Logger } from "@botdir/service-kit";
import type { DeliveryQueue } from "./queue.js";
import { createTicker } from "./ticker.js";

export interface OutboxRelayOptions {
  db: Db;
  queue: DeliveryQueue;
  clock: Clock;
  logger: Logger;
  /** Time between ticks (OUTBOX_RELAY_INTERVAL_MS). */
  intervalMs?: number;
  /** A delivery due this long ago without progress is handed off again (OUTBOX_STALE_MS). */
  staleMs?: number;
  /**
   * A first series never handed off is left alone this long after its creation, so the relay does
   * not race the request path's own after-commit hand-off. A redelivery has no such hand-off.
   */
  graceMs?: number;
  /** Rows claimed per transaction. */
  batchSize?: number;
}

export interface OutboxBacklog {
  /** Deliveries in state pending (due or waiting for a retry). */
  pending: number;
  /** How late the most overdue pending delivery is (now − next_attempt_at), 0 when none is due. */
  oldestAgeMs: number;
}

export interface OutboxRelayStats {
  ticks: number;
  handedOff: number;
  /** Ticks skipped or rolled back because Redis was unavailable. */
  skipped: number;
  errors: number;
  redisAvailable: boolean;
}

interface DueRow {
  id: string;
  bot_id: string;
  attempts_made: number;
  next_attempt_at: Date;
  traceparent: string | null;
}

const CLAIM_SQL = `
SELECT id, bot_id, attempts_made, next_attempt_at, traceparent
  FROM webhook_deliveries
 WHERE state = 'pending'
   AND ((handed_off_at IS NULL
         AND (series > 0 OR created_at <= $1::timestamptz - make_interval(secs => $2::double precision / 1000)))
     OR (handed_off_at IS NOT NULL
         AND next_attempt_at <= $1::timestamptz - make_interval(secs => $3::double precision / 1000)
         AND handed_off_at <= $1::timestamptz - make_interval(secs => $3::double precision / 1000)))
 ORDER BY next_attempt_at
 LIMIT $4
   FOR UPDATE SKIP LOCKED`;

export function createOutboxRelay(options: OutboxRelayOptions) {
  const { db, queue, clock, logger } = options;
  const intervalMs = options.intervalMs ?? 1_000;
  const staleMs = options.staleMs ?? 60_000;
  const graceMs = options.graceMs ?? 5_000;
  const batchSize = options.batchSize ?? 100;

  const stats: OutboxRelayStats = { ticks: 0, handedOff: 0, skipped: 0, errors: 0, redisAvailable: true };

  function redisDown(): void {
    stats.skipped++;
    if (stats.redisAvailable) {
      stats.redisAvailable = false;
      logger.warn({}, "outbox relay paused: Redis is unavailable; deliveries stay pending in PostgreSQL");
    }
  }

  function redisUp(): void {
    if (!stats.redisAvailable) {
      stats.redisAvailable = true;
      logger.info({}, "outbox relay resumed: Redis is available again");
    }
  }

  /** Claims one batch and hands it off in one transaction. Returns rows handed off, or -1 on a skip. */
  async function relayBatch(now: Date): Promise<number> {
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query<DueRow>(CLAIM_SQL, [
        now.toISOString(),
        graceMs,
        staleMs,
        batchSize,
      ]);
      if (rows.length === 0) {
        await client.query("COMMIT");
        return 0;
      }
      const ok = await queue.add(
        rows.map((r) => ({
          id: r.id,
          botId: r.bot_id,
          attemptsMade: r.attempts_made,
          nextAttemptAt: r.next_attempt_at,
          // The hand-off continues the trace the delivery was created under (its producer span's
          // parent), however long after and from whichever process.
          ...(r.traceparent ? { traceparent: r.traceparent } : {}),
        })),
        now,
      );
      if (!ok) {
        await client.query("ROLLBACK");
        return -1;
      }
      await client.query("UPDATE webhook_deliveries SET handed_off_at = $1 WHERE id = ANY($2::uuid[])", [
        now.toISOString(),
        rows.map((r) => r.id),
      ]);
      await client.query("COMMIT");
      return rows.length;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  }

  /** One pass: drains what is due, batch by batch. Resolves with the number handed off. */
  async function runTick(): Promise<number> {
    stats.ticks++;
    if (!queue.isReady()) {
      redisDown();
      return 0;
    }
    let total = 0;
    try {
      for (;;) {
        const count = await relayBatch(clock.now());
        if (count < 0) {
          redisDown();
          break;
        }
        redisUp();
        total += count;
        if (count < batchSize) break;
      }
    } catch (error) {
      stats.errors++;
      logger.error({ err: describeError(error) }, "outbox relay tick failed");
    }
    stats.handedOff += total;
    if (total > 0) logger.info({ count: total }, "outbox relay handed deliveries off");
    return total;
  }

  const ticker = createTicker(intervalMs, runTick);

  return {
    tick: ticker.tick,
    start: ticker.start,
    /** Stops the timer and waits for a tick in progress. */
    stop: ticker.stop,
    stats: (): OutboxRelayStats => ({ ...stats }),
    async backlog(): Promise<OutboxBacklog> {
      const { rows } = await db.pool.query<{ pending: number; oldest_age_ms: number | null }>(
        `SELECT count(*)::int AS pending,
                (EXTRACT(EPOCH FROM ($1::timestamptz - min(next_attempt_at) FILTER (WHERE next_attempt_at <= $1::timestamptz))) * 1000)::float8 AS oldest_age_ms
           FROM webhook_deliveries WHERE state = 'pending'`,
        [clock.now().toISOString()],
      );
      const row = rows[0];
      return { pending: row?.pending ?? 0, oldestAgeMs: Math.round(row?.oldest_age_ms ?? 0) };
    },
  };
}

export type OutboxRelay = ReturnType<typeof createOutboxRelay>;
