/**
 * The recovery driver: queues the votes of running recoveries (POST …/webhook/recover) in keyset
 * batches. Each step is one short transaction holding the recovery's row (SKIP LOCKED, so any number
 * of vote-ingest replicas run it): it looks at the next batch of the window's votes, makes the
 * undelivered ones pending and moves the cursor; after the commit the new deliveries are handed to
 * the queue (when that fails, the outbox relay does). A recovery keeps at most `maxInFlight`
 * deliveries pending, so its jobs reach the dispatcher a few hundred at a time and go through its
 * per-webhook fairness like any bot's burst, instead of standing in front of every other bot's
 * votes in the queue. And a recovery queues at most `maxPerSecond` deliveries a second
 * (RECOVERY_MAX_PER_SECOND, kept in its row, so the same over any number of replicas): a replay of
 * a day's votes runs beside live traffic at a pace the dispatchers absorb without delaying other
 * bots' deliveries, instead of as fast as the machine allows. Nothing lives only in Redis: a dispatcher or vote-ingest killed mid-recovery
 * leaves pending rows, which the outbox relay hands off again.
 */
import { randomBytes } from "node:crypto";
import { type Db, markHandedOff, runningRecoveries, stepRecovery } from "@botdir/db";
import {
  activeTraceparent,
  type Clock,
  describeError,
  inSpan,
  type Logger,
  spanContextOf,
} from "@botdir/service-kit";
import type { DeliveryQueue } from "./queue.js";
import { createTicker } from "./ticker.js";

export interface RecoveryDriverOptions {
  db: Db;
  queue: Pick<DeliveryQueue, "add" | "isReady">;
  clock: Clock;
  logger: Logger;
  /** Time between ticks (RECOVERY_INTERVAL_MS). */
  intervalMs?: number;
  /** Votes looked at per step (RECOVERY_BATCH). */
  batchSize?: number;
  /** Pending deliveries of one recovery at most (RECOVERY_MAX_IN_FLIGHT). */
  maxInFlight?: number;
  /** Deliveries one recovery queues a second at most, over all replicas (RECOVERY_MAX_PER_SECOND). */
  maxPerSecond?: number;
}

export interface RecoveryDriverStats {
  ticks: number;
  queued: number;
  errors: number;
}

/** A new trace for one recovered delivery, linked to its previous one and to the recovery's request. */
function newTrace(previous: string | null, recovery: string | null): Promise<string | null> {
  const links = [previous, recovery].flatMap((tp) => {
    const context = spanContextOf(tp);
    return context ? [{ context }] : [];
  });
  return inSpan(
    "webhook.recover.delivery",
    { root: true, needsTrace: true, links },
    // A new trace even in a process without a provider: the delivery's previous one must not stay.
    async () =>
      activeTraceparent() ?? `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-00`,
  );
}

export function createRecoveryDriver(options: RecoveryDriverOptions) {
  const { db, queue, clock, logger } = options;
  const intervalMs = options.intervalMs ?? 250;
  const stepOptions = {
    batchSize: options.batchSize ?? 100,
    maxInFlight: options.maxInFlight ?? 100,
    maxPerSecond: options.maxPerSecond ?? 100,
    newTrace,
  };
  const stats: RecoveryDriverStats = { ticks: 0, queued: 0, errors: 0 };
  /** Steps one recovery until it waits (in flight, its pace), ends or another replica holds it. Returns deliveries queued. */
  async function drive(recoveryId: string): Promise<number> {
    let total = 0;
    for (;;) {
      const now = clock.now();
      const step = await stepRecovery(db, recoveryId, now, stepOptions);
      if (step.kind !== "queued") {
        if (step.kind === "done" || step.kind === "stopped") {
          logger.info({ recovery_id: recoveryId, state: step.kind }, "webhook recovery ended");
        }
        return total;
      }
      total += step.deliveries.length;
      if (step.deliveries.length > 0 && queue.isReady() && (await queue.add(step.deliveries, now))) {
        await markHandedOff(
          db,
          step.deliveries.map((d) => d.id),
          now,
        );
      }
    }
  }

  async function runTick(): Promise<number> {
    stats.ticks++;
    let total = 0;
    try {
      for (const id of await runningRecoveries(db)) total += await drive(id);
    } catch (error) {
      stats.errors++;
      logger.error({ err: describeError(error) }, "webhook recovery tick failed");
    }
    stats.queued += total;
    return total;
  }

  const ticker = createTicker(intervalMs, runTick);

  return {
    tick: ticker.tick,
    start: ticker.start,
    /** Stops the timer and waits for a tick in progress. */
    stop: ticker.stop,
    stats: (): RecoveryDriverStats => ({ ...stats }),
  };
}

export type RecoveryDriver = ReturnType<typeof createRecoveryDriver>;
