/**
 * The reminder scheduler: every `intervalMs` it turns the due `vote.available` reminders into
 * deliveries, `batchSize` per statement (scheduleReminders of @botdir/db: claimed FOR UPDATE SKIP
 * LOCKED in remind_at order, so any number of vote-ingest replicas run it and never both send one),
 * until fewer than a batch were due; after each commit the new deliveries are handed to the queue
 * (when that fails, the outbox relay does). All its state is the reminders' rows in PostgreSQL: a
 * restart loses nothing and pending reminders cost neither memory nor Redis keys.
 */
import { type Db, markHandedOff, scheduleReminders } from "@botdir/db";
import { type Clock, describeError, type Logger } from "@botdir/service-kit";
import type { DeliveryQueue } from "./queue.js";
import { createTicker } from "./ticker.js";

export interface ReminderSchedulerOptions {
  db: Db;
  /** Absent: the outbox relay hands every reminder's delivery off. */
  queue?: Pick<DeliveryQueue, "add" | "isReady">;
  clock: Clock;
  logger: Logger;
  /** Time between ticks (REMINDER_INTERVAL_MS). */
  intervalMs?: number;
  /** Reminders per statement (REMINDER_BATCH). */
  batchSize?: number;
}

export interface ReminderSchedulerStats {
  ticks: number;
  /** vote.available deliveries made. */
  scheduled: number;
  errors: number;
}

export const DEFAULT_REMINDER_INTERVAL_MS = 2_000;
export const DEFAULT_REMINDER_BATCH = 500;

export function createReminderScheduler(options: ReminderSchedulerOptions) {
  const { db, queue, clock, logger } = options;
  const batchSize = options.batchSize ?? DEFAULT_REMINDER_BATCH;
  const stats: ReminderSchedulerStats = { ticks: 0, scheduled: 0, errors: 0 };

  async function runTick(): Promise<number> {
    stats.ticks++;
    let total = 0;
    try {
      for (;;) {
        const now = clock.now();
        const { claimed, deliveries } = await scheduleReminders(db, now, batchSize);
        total += deliveries.length;
        stats.scheduled += deliveries.length;
        if (deliveries.length > 0 && queue?.isReady()) {
          const handOffs = deliveries.map((d) => ({
            id: d.id,
            botId: d.botId,
            attemptsMade: 0,
            nextAttemptAt: now,
          }));
          if (await queue.add(handOffs, now)) {
            await markHandedOff(
              db,
              deliveries.map((d) => d.id),
              now,
            );
          }
        }
        if (claimed < batchSize) return total;
      }
    } catch (error) {
      stats.errors++;
      logger.error({ err: describeError(error) }, "reminder tick failed");
      return total;
    }
  }

  const ticker = createTicker(options.intervalMs ?? DEFAULT_REMINDER_INTERVAL_MS, runTick);

  return {
    /** One run now (after any run in progress): the deliveries it made. */
    tick: ticker.tick,
    start: ticker.start,
    /** Stops the timer and waits for a tick in progress. */
    stop: ticker.stop,
    stats: (): ReminderSchedulerStats => ({ ...stats }),
  };
}

export type ReminderScheduler = ReturnType<typeof createReminderScheduler>;
