/**
 * Dead endpoints: a bot's webhook is disabled at once when its receiver answers an attempt with
 * `410 Gone` (the receiver says the endpoint is gone for good; Standard Webhooks recommends
 * disabling on it), and otherwise when every attempt to it has failed for
 * WEBHOOK_DISABLE_AFTER_MS across at least WEBHOOK_DISABLE_MIN_DELIVERIES deliveries. Disabling
 * ends the bot's pending deliveries `failed` with failure_reason `endpoint_disabled`, and no more
 * attempts are claimed (deliveries.ts) until the URL is set again or the webhook is re-enabled
 * (vote-ingest's listings service clears webhook_disabled_at and restarts the window).
 *
 * Checked only after a failed attempt, so a successful delivery costs nothing extra. The failure
 * streak starts after the latest successful attempt and after webhook_enabled_at.
 *
 * The check costs one index probe unless the endpoint may really be dead (GATE_SQL): the streak can
 * be old enough only if the newest attempt made by the cut-off (now - WEBHOOK_DISABLE_AFTER_MS,
 * and since the webhook was enabled) failed. Only then is the streak itself read (DISABLE_SQL,
 * which reads every failed attempt since the last success). Without the gate every failed attempt
 * read the whole streak: a burst of failures cost O(n²) rows (measured: 2.8 ms and 1,300 buffers
 * per failed attempt in the benchmark's `hostile` drain, a third of PostgreSQL's time there).
 */
import type { Db } from "@botdir/db";

export interface DeadEndpointRules {
  /** WEBHOOK_DISABLE_AFTER_MS: how long every attempt must have failed (default 5 days). */
  afterMs: number;
  /** WEBHOOK_DISABLE_MIN_DELIVERIES: distinct deliveries that must have failed attempts (default 5). */
  minDeliveries: number;
}

export const DEFAULT_DEAD_ENDPOINT_RULES: DeadEndpointRules = {
  afterMs: 5 * 24 * 60 * 60 * 1000,
  minDeliveries: 5,
};

export const ENDPOINT_DISABLED = "endpoint_disabled";
export const DEAD_ENDPOINT_REASON = "dead_endpoint";
/** webhook_disabled_reason after a 410 answer. */
export const GONE_REASON = "gone";
export const GONE_STATUS = 410;

/** Ends the pending deliveries of the bot disabled by the CTE `b` ($2: now); shared by both rules. */
const END_PENDING_CTE = `p AS (
  UPDATE webhook_deliveries d
     SET state = 'failed', completed_at = $2, lease_until = NULL, attempt_started_at = NULL,
         updated_at = $2, failure_reason = '${ENDPOINT_DISABLED}'
    FROM b
   WHERE d.bot_id = b.id AND d.state = 'pending'
  RETURNING d.id
)
SELECT (SELECT count(*) FROM b)::int AS disabled, (SELECT count(*) FROM p)::int AS ended`;

/**
 * $1 bot, $2 the cut-off (now - afterMs). True when the newest attempt of the bot made by the
 * cut-off, and after the webhook was (re-)enabled, failed: a necessary condition of DISABLE_SQL
 * (if the streak's first failure F is at or before the cut-off, the newest attempt N in
 * (enabled, cut-off] is at or after F, hence after every success, hence a failure). One probe of
 * webhook_attempts_bot_newest_idx.
 */
const GATE_SQL = `
SELECT a.error_kind IS NOT NULL AS failing
  FROM bots b
  JOIN LATERAL (
    SELECT error_kind FROM webhook_attempts
     WHERE bot_id = b.id
       AND attempted_at <= $2
       AND attempted_at > COALESCE(b.webhook_enabled_at, '-infinity'::timestamptz)
     ORDER BY attempted_at DESC, id DESC
     LIMIT 1
  ) a ON true
 WHERE b.id = $1 AND b.webhook_url IS NOT NULL AND b.webhook_disabled_at IS NULL`;

/**
 * $1 bot, $2 now, $3 the streak must have started by ($2 - afterMs), $4 minimum deliveries.
 * `s` is the start of the current failure streak; `f` the failed attempts since; the bot is disabled
 * (and its pending deliveries failed) only when the first of them is old enough and enough distinct
 * deliveries failed. The bot row update is conditional, so concurrent checks disable once.
 */
const DISABLE_SQL = `
WITH s AS (
  SELECT GREATEST(
           COALESCE(b.webhook_enabled_at, '-infinity'::timestamptz),
           COALESCE((SELECT max(a.attempted_at) FROM webhook_attempts a
                      WHERE a.bot_id = b.id AND a.error_kind IS NULL), '-infinity'::timestamptz)
         ) AS since
    FROM bots b
   WHERE b.id = $1 AND b.webhook_url IS NOT NULL AND b.webhook_disabled_at IS NULL
), f AS (
  SELECT min(a.attempted_at) AS first_failure, count(DISTINCT a.delivery_id) AS deliveries
    FROM webhook_attempts a, s
   WHERE a.bot_id = $1 AND a.attempted_at > s.since AND a.error_kind IS NOT NULL
), b AS (
  UPDATE bots
     SET webhook_disabled_at = $2, webhook_disabled_reason = '${DEAD_ENDPOINT_REASON}', updated_at = $2
    FROM f
   WHERE bots.id = $1 AND bots.webhook_disabled_at IS NULL
     AND f.first_failure <= $3 AND f.deliveries >= $4
  RETURNING bots.id
), ${END_PENDING_CTE}`;

/**
 * $1 bot, $2 now, $3 the URL that answered 410, $4 when that attempt was made. Disables only the
 * webhook that answered: not when the owner has since set another URL or re-enabled it.
 */
const GONE_SQL = `
WITH b AS (
  UPDATE bots
     SET webhook_disabled_at = $2, webhook_disabled_reason = '${GONE_REASON}', updated_at = $2
   WHERE bots.id = $1 AND bots.webhook_disabled_at IS NULL AND bots.webhook_url = $3
     AND COALESCE(bots.webhook_enabled_at, '-infinity'::timestamptz) <= $4
  RETURNING bots.id
), ${END_PENDING_CTE}`;

/** After a failed attempt: disables the bot's webhook when the rules say it is dead. */
export async function disableIfDead(
  db: Db,
  botId: string,
  now: Date,
  rules: DeadEndpointRules,
): Promise<{ disabled: boolean; endedDeliveries: number }> {
  const cutoff = new Date(now.getTime() - rules.afterMs);
  const gate = await db.pool.query<{ failing: boolean }>({
    name: "dispatcher_dead_endpoint_gate",
    text: GATE_SQL,
    values: [botId, cutoff],
  });
  if (!gate.rows[0]?.failing) return { disabled: false, endedDeliveries: 0 };
  const { rows } = await db.pool.query<{ disabled: number; ended: number }>({
    name: "dispatcher_disable_if_dead",
    text: DISABLE_SQL,
    values: [botId, now, cutoff, rules.minDeliveries],
  });
  return { disabled: (rows[0]?.disabled ?? 0) > 0, endedDeliveries: rows[0]?.ended ?? 0 };
}

/** After an attempt answered 410 Gone: disables the bot's webhook at once (if it is still that URL). */
export async function disableGone(
  db: Db,
  input: { botId: string; url: string; attemptedAt: Date; now: Date },
): Promise<{ disabled: boolean; endedDeliveries: number }> {
  const { rows } = await db.pool.query<{ disabled: number; ended: number }>({
    name: "dispatcher_disable_gone",
    text: GONE_SQL,
    values: [input.botId, input.now, input.url, input.attemptedAt],
  });
  return { disabled: (rows[0]?.disabled ?? 0) > 0, endedDeliveries: rows[0]?.ended ?? 0 };
}

/** The dead-endpoint statements, for the plan test (test/plans.test.ts). */
export const DEAD_ENDPOINT_STATEMENTS = { GATE_SQL, DISABLE_SQL } as const;
