/**
 * `vote.available` reminders: a vote window whose bot's webhook subscribes to vote.available keeps
 * its end in vote_windows.remind_at (written by the cast). The scheduler turns due reminders into
 * deliveries with one statement per batch (botdir_schedule_reminders, migration
 * 20261128120000_webhook_events): the due rows are claimed in remind_at order through a partial index
 * of pending reminders only, FOR UPDATE SKIP LOCKED, cleared, and a delivery made for each whose bot
 * still has a usable webhook subscribed to vote.available. Nothing is held in memory or in Redis,
 * so the cost of a batch does not depend on how many reminders are pending, a restart loses
 * nothing, and concurrent schedulers never take the same reminder (and the unique
 * (vote_id, event) forbids a second delivery anyway).
 */
import type { Db } from "./client.js";
import { newDeliveryId } from "./deliveries.js";

export interface ScheduledReminders {
  /** Reminders taken (due, now cleared), with or without a delivery. */
  claimed: number;
  /** The vote.available deliveries made, pending and not handed off yet. */
  deliveries: { id: string; botId: string }[];
}

/** Makes the deliveries of up to `batch` reminders due by `now`; see the module comment. */
export async function scheduleReminders(db: Db, now: Date, batch: number): Promise<ScheduledReminders> {
  const ids = Array.from({ length: batch }, () => newDeliveryId(now.getTime()));
  const { rows } = await db.pool.query<{ id: string | null; bot_id: string | null; claimed: number }>({
    name: "schedule_reminders",
    text: "SELECT id, bot_id, claimed FROM botdir_schedule_reminders($1::uuid[], $2::int, $3::timestamptz)",
    values: [ids, batch, now],
  });
  const deliveries = rows.flatMap((r) => (r.id && r.bot_id ? [{ id: r.id, botId: r.bot_id }] : []));
  return { claimed: rows[0]?.claimed ?? 0, deliveries };
}
