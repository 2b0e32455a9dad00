/**
 * Webhook delivery queries that more than one app runs: the attempt log an owner reads (the edit
 * page through vote-ingest, the public API with the bot token) and manual redelivery (vote-ingest's
 * internal endpoint and botctl, the public API).
 */
import { randomUUID } from "node:crypto";
import type { Db } from "./client.js";
import { toIso } from "./time.js";

/** The edit page (and the public API) list the last ten attempts. */
export const ATTEMPTS_SHOWN = 10;

export type DeliveryStateName = "pending" | "delivered" | "failed";

/** One attempt as owners see it. */
export interface AttemptView {
  deliveryId: string;
  attempt: number;
  /** 0 for the delivery's original series of attempts, n after its nth manual redelivery. */
  series: number;
  statusCode: number | null;
  /** null when the attempt succeeded; otherwise e.g. http_status, timeout, connection, redirect. */
  errorKind: string | null;
  /** This attempt's own outcome: `delivered` (a 2xx answer) or `failed`. */
  outcome: "delivered" | "failed";
  /** The delivery's state now: `pending` (an attempt will follow), `delivered` or `failed`. */
  deliveryState: DeliveryStateName;
  attemptedAt: string;
  /** The trace id the attempt was made under (its X-Webhook-Trace); null before traces were kept. */
  traceId: string | null;
  /** True for a test event (webhook.test, one attempt, no vote): its own table, no delivery. */
  test: boolean;
  /** The event the delivery carries (webhook_deliveries.event); null for a test event, not recorded. */
  event: "vote.create" | "vote.available" | null;
  /** True for an attempt of the series a recovery started (POST …/webhook/recover). */
  recovered: boolean;
}

/**
 * The last ten attempts of a bot, newest first: delivery attempts (webhook_attempts_bot_newest_idx)
 * and test events (webhook_test_attempts_bot_newest_idx), ten of each read, merged.
 */
export async function listRecentAttempts(db: Db, botId: string): Promise<AttemptView[]> {
  const { rows } = await db.pool.query<{
    delivery_id: string;
    attempt_number: number;
    series: number;
    status_code: number | null;
    error_kind: string | null;
    state: DeliveryStateName;
    attempted_at: Date;
    trace_id: string | null;
    test: boolean;
    event: "vote.create" | "vote.available" | null;
    recovered: boolean;
  }>({
    name: "db.recent_attempts",
    text: `SELECT * FROM (
       (SELECT a.delivery_id, a.attempt_number, a.series, a.status_code, a.error_kind, d.state,
               a.attempted_at, a.trace_id, false AS test, d.event, a.id AS tie,
               COALESCE(d.recovery_id IS NOT NULL AND a.series = d.recovery_series, false) AS recovered
          FROM webhook_attempts a
          JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE a.bot_id = $1
         ORDER BY a.attempted_at DESC, a.id DESC
         LIMIT $2)
       UNION ALL
       (SELECT t.id, 1, 0, t.status_code, t.error_kind,
               (CASE WHEN t.delivered THEN 'delivered' ELSE 'failed' END)::delivery_state,
               t.attempted_at, t.trace_id, true, NULL::text, 0, false
          FROM webhook_test_attempts t
         WHERE t.bot_id = $1
         ORDER BY t.attempted_at DESC
         LIMIT $2)
     ) attempts
     ORDER BY attempted_at DESC, test, tie DESC
     LIMIT $2`,
    values: [botId, ATTEMPTS_SHOWN],
  });
  return rows.map((row) => ({
    deliveryId: row.delivery_id,
    attempt: row.attempt_number,
    series: row.series,
    statusCode: row.status_code,
    errorKind: row.error_kind,
    // The dispatcher records error_kind null exactly when the answer was a 2xx.
    outcome: row.error_kind === null ? "delivered" : "failed",
    deliveryState: row.state,
    attemptedAt: toIso(row.attempted_at),
    traceId: row.trace_id,
    test: row.test,
    event: row.event,
    recovered: row.recovered,
  }));
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * A new delivery id: a version 7 UUID (RFC 9562), its first 48 bits the creation time in Unix
 * milliseconds and 74 random bits after the version and variant. Ids that grow with time keep the
 * writes of the deliveries and attempts indexes keyed by the id (and the claims' and records'
 * lookups, which reach the newest deliveries) on the right-hand pages of those indexes instead of
 * on a random page of millions: with 2 M deliveries, claiming and recording one cost PostgreSQL
 * about a third less CPU (docs/performance.md, `BENCH_ROWS=1`). The time they carry is when the
 * vote was recorded, which the body's `voted_at` tells anyway.
 */
export function newDeliveryId(nowMs: number = Date.now()): string {
  const time = Math.max(0, Math.floor(nowMs)).toString(16).padStart(12, "0").slice(-12);
  // randomUUID(): xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx; its variant and random tail are kept.
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`;
}

/**
 * The W3C context of a delivery whose row keeps none: a vote cast where nothing is exported and
 * the caller sent no `traceparent` (no ids are made for it), or a delivery made before traces were
 * kept. Its trace id is the delivery id's 32 hex digits and its span id their last 16 (the UUID's
 * random tail), not sampled, as the ids-only spans are: every hand-off, attempt, record and
 * redelivery link of that delivery names the same trace, and the owner's `X-Webhook-Trace` is the
 * delivery id without its dashes. PostgreSQL's record statement reads it the same way (migration
 * 20261127200000_delivery_trace_by_id).
 */
export function deliveryTraceparent(deliveryId: string): string {
  const hex = deliveryTraceId(deliveryId);
  return `00-${hex}-${hex.slice(16)}-00`;
}

/** The trace id of deliveryTraceparent: the delivery id's 32 hex digits, lowercase. */
export function deliveryTraceId(deliveryId: string): string {
  return deliveryId.replaceAll("-", "").toLowerCase();
}

/** Whether `value` is a UUID (a delivery's or a recovery's id); anything else is simply not found. */
export function isUuid(value: unknown): value is string {
  return typeof value === "string" && UUID.test(value);
}

/** Whether `value` can be a delivery id (a UUID); anything else is simply not found. */
export const isDeliveryId = isUuid;

export type RedeliverResult =
  /** No delivery with this id for this bot (also: another bot's delivery, a malformed id). */
  | { kind: "not_found" }
  /** The delivery is still pending: its own series of attempts is not over. */
  | { kind: "pending" }
  /** The bot has no webhook URL now: the new attempts would have nowhere to go. */
  | { kind: "no_webhook" }
  /** A fresh series starts now: hand `delivery` to the queue (jobId = its id). */
  | {
      kind: "redelivered";
      delivery: {
        id: string;
        botId: string;
        attemptsMade: number;
        nextAttemptAt: Date;
        traceparent?: string;
      };
      series: number;
      /**
       * The context the delivery had before (its original trace, deliveryTraceparent where its row
       * kept none): the new trace links to it.
       */
      previousTraceparent: string;
    };

/**
 * Starts a fresh series of five attempts of a `delivered` or `failed` delivery of `botId`: the same
 * delivery id and vote (so the same body bytes, which the dispatcher rebuilds from the vote row),
 * attempts_made 0, due now, not handed off yet (handed_off_at NULL, so the outbox relay picks it up
 * at its next tick if the caller cannot add the job itself). One round trip; the row lock makes two
 * concurrent redeliveries start one series (the second sees `pending`).
 */
export async function redeliver(
  db: Db,
  botId: string,
  deliveryId: string,
  now: Date,
  traceparent: string | null = null,
): Promise<RedeliverResult> {
  if (!isDeliveryId(deliveryId)) return { kind: "not_found" };
  const { rows } = await db.pool.query<{
    state: DeliveryStateName;
    has_webhook: boolean;
    series: number | null;
    previous_traceparent: string | null;
  }>(
    // botdir_redeliver (migrations 20261125130000_dispatcher_lock_then_write, 20261127100000_trace_context)
    // locks the row in one statement and reads and writes it in the next: a locking CTE under the
    // UPDATE deadlocked. The new series keeps `traceparent`, the redelivery's own trace.
    `SELECT state, has_webhook, series, previous_traceparent
       FROM botdir_redeliver($1::uuid, $2::varchar, $3::timestamptz, $4::varchar)`,
    [deliveryId, botId, now, traceparent],
  );
  const row = rows[0];
  if (!row) return { kind: "not_found" };
  if (row.series !== null) {
    return {
      kind: "redelivered",
      delivery: {
        id: deliveryId,
        botId,
        attemptsMade: 0,
        nextAttemptAt: now,
        ...(traceparent ? { traceparent } : {}),
      },
      series: row.series,
      previousTraceparent: row.previous_traceparent ?? deliveryTraceparent(deliveryId),
    };
  }
  if (row.state === "pending") return { kind: "pending" };
  return { kind: "no_webhook" };
}
