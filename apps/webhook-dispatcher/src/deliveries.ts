/**
 * PostgreSQL side of a delivery: claiming an attempt and recording its outcome. PostgreSQL is the
 * truth; a BullMQ job only says "look at this delivery now".
 *
 * Claim (the delivery row locked):
 * - not pending (delivered, failed, unknown)             -> nothing to do;
 * - an attempt holds an unexpired lease                   -> busy until the lease ends;
 * - an attempt's lease expired while still pending        -> that process died mid-attempt: record
 *   the attempt as `interrupted` (it counts as one of the five), schedule the next one like any
 *   failed attempt, or mark the delivery failed after the fifth;
 * - next_attempt_at is still ahead                        -> too early;
 * - the bot has no webhook configured any more           -> failed, no attempt made;
 * - otherwise: attempts_made + 1, lease = now + leaseMs   -> claimed, attempt number = attempts_made;
 *   if no configured key decrypts the bot's secret, the claim stands and is reported `unreadable`:
 *   the handler records that attempt as `secret_unreadable` and fails the delivery (no loop).
 *
 * The common branches (claimed, busy, early, not pending) take ONE statement (CLAIM_SQL: lock,
 * decide, claim and read the bot and vote in a single round trip). The rare branches that must write
 * something else (an expired lease, five attempts already made, a removed webhook) fall back to a
 * transaction that locks the row again and re-evaluates everything (claimInTransaction).
 *
 * Record (one statement): the attempt row and the new state, only while the claim is still ours
 * (same attempt number and lease). A claim that was taken over (our lease expired and another
 * replica recorded the attempt as interrupted) records nothing: never a second success, never a
 * sixth attempt.
 */

import { type BatchLimits, createBatcher } from "@botdir/batcher";
import { type Db, inTransaction } from "@botdir/db";
import {
  VOTE_AVAILABLE_EVENT,
  VOTE_WINDOW_MS,
  WEBHOOK_MAX_ATTEMPTS,
  type WebhookEventName,
} from "@botdir/schema";
import type { AttemptOutcome } from "./http-client.js";
import { type RetryDelays, retryDelayMs } from "./schedule.js";

export interface DeliveryTarget {
  deliveryId: string;
  /** What the delivery sends: `vote.create`, or `vote.available` when the vote's window ended. */
  event: WebhookEventName;
  botId: string;
  userId: string;
  votedAt: Date;
  /** The vote page's query string the vote was cast with (vote_log.query), or null. */
  query: Record<string, string> | null;
  /** When the event happened: the vote for `vote.create`, the end of its window for `vote.available`. */
  eventAt: Date;
  url: string;
  /** Decrypted right after the claim (see ClaimResult `unreadable`). */
  secret: string;
  /** The secret before a rotation, while its overlap runs (it signs beside `secret`); else null. */
  previousSecret: string | null;
}

export type ClaimResult =
  | {
      kind: "done";
      reason: "not_found" | "delivered" | "failed" | "no_webhook" | "exhausted" | "endpoint_disabled";
    }
  | { kind: "busy"; until: Date }
  | { kind: "early"; at: Date }
  | { kind: "claimed"; attemptNumber: number; leaseUntil: Date; target: DeliveryTarget }
  /**
   * Claimed, but no configured key decrypts the bot's webhook secret: the attempt is used and must
   * be recorded as `secret_unreadable`, ending the delivery (RecordInput.final).
   */
  | {
      kind: "unreadable";
      attemptNumber: number;
      leaseUntil: Date;
      botId: string;
      votedAt: Date;
      /** What the decryption threw (a key id on it, if any, is logged). */
      error: unknown;
    };

export type RecordResult =
  | { kind: "delivered" }
  | { kind: "retry"; nextAttemptAt: Date }
  | { kind: "failed" }
  | { kind: "superseded" };

export interface ClaimOptions {
  now: Date;
  /** How long the claim protects the attempt: the HTTP timeout plus a margin. */
  leaseMs: number;
  /** A job that fires this little before next_attempt_at still runs (clock skew between hosts). */
  earlySlackMs: number;
  retryDelays: RetryDelays;
  /** Decrypts bots.webhook_secret_encrypted; throwing makes the claim `unreadable`. */
  decryptSecret: (stored: string) => string;
}

/** The part of a pg client used here (the dispatcher reaches pg only through @botdir/db). */
interface PoolClient {
  query<R extends object = object>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

interface DeliveryRow {
  state: "pending" | "delivered" | "failed";
  attempts_made: number;
  next_attempt_at: Date;
  lease_until: Date | null;
  attempt_started_at: Date | null;
  bot_id: string;
  user_id: string;
  voted_at: Date;
  query: Record<string, string> | null;
  event: WebhookEventName;
  webhook_url: string | null;
  webhook_secret_encrypted: string | null;
  webhook_previous_secret_encrypted: string | null;
  webhook_disabled_at: Date | null;
}

/**
 * The vote page's query string of a claimed delivery's vote (vote_log.query, null when none), read
 * beside the claim function's row in the same statement: two primary-key probes, and only for a
 * row that was claimed.
 */
const QUERY_OF_CLAIMED = `CASE WHEN c.claimed_attempt IS NOT NULL THEN
         (SELECT v.query FROM webhook_deliveries wd JOIN vote_log v ON v.id = wd.vote_id WHERE wd.id = c.id)
       END AS query`;

/**
 * The claim statements: the function botdir_claim_deliveries (migration
 * 20261125130000_dispatcher_lock_then_write) locks the delivery rows in one statement and claims
 * them in the next, in one round trip. It claims a row only when every condition of a claim holds
 * on its newest version ($2 lease until, $3 now, $4 due by, $5 the attempt limit), and returns, for
 * each row it locked, what the handler needs and, when nothing was claimed, the row as locked so
 * the caller can tell busy / early / not pending / a rare branch apart. (Reading the row under a
 * locking CTE of the UPDATE itself deadlocked: see the migration.)
 *
 * CLAIM_SQL claims one delivery, waiting for its row lock (a concurrent claim commits, then this one
 * sees its result). CLAIM_BATCH_SQL claims many (ids $1) and skips rows locked elsewhere, so it
 * never waits for a row lock and can never take part in a deadlock with another batch; a delivery
 * whose row was locked (a concurrent claim or record, the relay's hand-off mark) is simply not
 * returned, and its caller claims it with CLAIM_SQL.
 */
const CLAIM_SQL = `
SELECT state, attempts_made, next_attempt_at, lease_until, bot_id, user_id, voted_at, claimed_attempt,
       webhook_url, webhook_secret_encrypted, webhook_previous_secret_encrypted, event, ${QUERY_OF_CLAIMED}
  FROM botdir_claim_deliveries(ARRAY[$1::uuid], true, $2::timestamptz, $3::timestamptz, $4::timestamptz, $5::int) c`;

interface ClaimRow {
  state: DeliveryRow["state"];
  attempts_made: number;
  next_attempt_at: Date;
  lease_until: Date | null;
  bot_id: string;
  user_id: string;
  voted_at: Date;
  query: Record<string, string> | null;
  claimed_attempt: number | null;
  webhook_url: string | null;
  webhook_secret_encrypted: string | null;
  webhook_previous_secret_encrypted: string | null;
  event: WebhookEventName;
}

const CLAIM_BATCH_SQL = `
SELECT id, state, attempts_made, next_attempt_at, lease_until, bot_id, user_id, voted_at, claimed_attempt,
       webhook_url, webhook_secret_encrypted, webhook_previous_secret_encrypted, event, ${QUERY_OF_CLAIMED}
  FROM botdir_claim_deliveries($1::uuid[], false, $2::timestamptz, $3::timestamptz, $4::timestamptz, $5::int) c`;

export async function claimAttempt(db: Db, deliveryId: string, options: ClaimOptions): Promise<ClaimResult> {
  const { leaseUntil, dueBy } = claimTimes(options);
  const { rows } = await db.pool.query<ClaimRow>({
    name: "dispatcher_claim",
    text: CLAIM_SQL,
    values: [deliveryId, leaseUntil, options.now, dueBy, WEBHOOK_MAX_ATTEMPTS],
  });
  return settleClaim(db, deliveryId, rows[0], options);
}

function claimTimes(options: ClaimOptions): { leaseUntil: Date; dueBy: Date } {
  return {
    leaseUntil: new Date(options.now.getTime() + options.leaseMs),
    dueBy: new Date(options.now.getTime() + options.earlySlackMs),
  };
}

/** Turns the row CLAIM_SQL (or CLAIM_BATCH_SQL) returned for one delivery into the claim's result. */
async function settleClaim(
  db: Db,
  deliveryId: string,
  row: ClaimRow | undefined,
  options: ClaimOptions,
): Promise<ClaimResult> {
  const { now } = options;
  const { leaseUntil, dueBy } = claimTimes(options);
  if (!row) return { kind: "done", reason: "not_found" };
  const webhook = webhookOf(row);
  if (row.claimed_attempt !== null && webhook) {
    return claimedOrUnreadable(deliveryId, row, webhook, row.claimed_attempt, leaseUntil, options);
  }
  if (row.state !== "pending") return { kind: "done", reason: row.state };
  if (row.lease_until && row.lease_until.getTime() > now.getTime()) {
    return { kind: "busy", until: row.lease_until };
  }
  if (
    !row.lease_until &&
    row.attempts_made < WEBHOOK_MAX_ATTEMPTS &&
    row.next_attempt_at.getTime() > dueBy.getTime()
  ) {
    return { kind: "early", at: row.next_attempt_at };
  }
  // An expired lease, five attempts made, or no webhook: each writes something else.
  return claimInTransaction(db, deliveryId, options);
}

/** The bot's webhook as a claim read it: its URL and encrypted secret. */
interface Webhook {
  url: string;
  encryptedSecret: string;
}

/** The row's webhook, or null when the bot has none (no URL or no secret). */
function webhookOf(row: Pick<DeliveryRow, "webhook_url" | "webhook_secret_encrypted">): Webhook | null {
  if (!row.webhook_url || !row.webhook_secret_encrypted) return null;
  return { url: row.webhook_url, encryptedSecret: row.webhook_secret_encrypted };
}

/**
 * A claim whose secret is decrypted: `claimed`, or `unreadable` when no key decrypts it. Giving
 * the claim back instead would loop for ever (BullMQ retries, the outbox relay re-adds the job).
 */
function claimedOrUnreadable(
  deliveryId: string,
  row: Pick<
    DeliveryRow,
    "bot_id" | "user_id" | "voted_at" | "query" | "event" | "webhook_previous_secret_encrypted"
  >,
  webhook: Webhook,
  attemptNumber: number,
  leaseUntil: Date,
  options: ClaimOptions,
): ClaimResult {
  let secret: string;
  try {
    secret = options.decryptSecret(webhook.encryptedSecret);
  } catch (error) {
    return { kind: "unreadable", attemptNumber, leaseUntil, botId: row.bot_id, votedAt: row.voted_at, error };
  }
  const previousSecret = decryptPrevious(row.webhook_previous_secret_encrypted, options);
  return claimed(deliveryId, row, webhook.url, attemptNumber, leaseUntil, secret, previousSecret);
}

/** The result of a successful claim: what the attempt sends, and to where. */
function claimed(
  deliveryId: string,
  row: Pick<DeliveryRow, "bot_id" | "user_id" | "voted_at" | "query" | "event">,
  url: string,
  attemptNumber: number,
  leaseUntil: Date,
  secret: string,
  previousSecret: string | null,
): ClaimResult {
  return {
    kind: "claimed",
    attemptNumber,
    leaseUntil,
    target: {
      deliveryId,
      event: row.event,
      botId: row.bot_id,
      userId: row.user_id,
      votedAt: row.voted_at,
      query: row.query,
      eventAt:
        row.event === VOTE_AVAILABLE_EVENT ? new Date(row.voted_at.getTime() + VOTE_WINDOW_MS) : row.voted_at,
      url,
      secret,
      previousSecret,
    },
  };
}

/** The previous secret of an overlap; one that cannot be decrypted is left out (the new one signs). */
function decryptPrevious(stored: string | null, options: ClaimOptions): string | null {
  if (!stored) return null;
  try {
    return options.decryptSecret(stored);
  } catch {
    return null;
  }
}

/** Every branch of a claim, in one transaction with the row locked (the rare paths). */
async function claimInTransaction(db: Db, deliveryId: string, options: ClaimOptions): Promise<ClaimResult> {
  const { now } = options;
  return inTransaction(db, async (client) => {
    const found = await client.query<DeliveryRow>(
      `SELECT d.state, d.attempts_made, d.next_attempt_at, d.lease_until, d.attempt_started_at,
              d.bot_id, d.event, v.user_id, v.voted_at, v.query, b.webhook_url, b.webhook_secret_encrypted,
              CASE WHEN b.webhook_previous_secret_until > $2 THEN b.webhook_previous_secret_encrypted END
                AS webhook_previous_secret_encrypted,
              b.webhook_disabled_at
         FROM webhook_deliveries d
         JOIN vote_log v ON v.id = d.vote_id
         JOIN bots b ON b.id = d.bot_id
        WHERE d.id = $1
          FOR NO KEY UPDATE OF d`,
      [deliveryId, now],
    );
    const row = found.rows[0];
    if (!row) return { kind: "done", reason: "not_found" };
    if (row.state !== "pending") return { kind: "done", reason: row.state };

    if (row.lease_until) {
      if (row.lease_until.getTime() > now.getTime()) return { kind: "busy", until: row.lease_until };
      const after = await recordInterrupted(client, deliveryId, row, options);
      if (after === "failed") return { kind: "done", reason: "exhausted" };
    }

    if (row.attempts_made >= WEBHOOK_MAX_ATTEMPTS) {
      await finish(client, deliveryId, "failed", now);
      return { kind: "done", reason: "exhausted" };
    }
    if (row.next_attempt_at.getTime() > now.getTime() + options.earlySlackMs) {
      return { kind: "early", at: row.next_attempt_at };
    }
    const webhook = webhookOf(row);
    if (!webhook) {
      await finish(client, deliveryId, "failed", now);
      return { kind: "done", reason: "no_webhook" };
    }
    if (row.webhook_disabled_at) {
      await finish(client, deliveryId, "failed", now, "endpoint_disabled");
      return { kind: "done", reason: "endpoint_disabled" };
    }

    const attemptNumber = row.attempts_made + 1;
    const leaseUntil = new Date(now.getTime() + options.leaseMs);
    await client.query(
      `UPDATE webhook_deliveries
          SET attempts_made = $2, lease_until = $3, attempt_started_at = $4, updated_at = $4
        WHERE id = $1`,
      [deliveryId, attemptNumber, leaseUntil, now],
    );
    return claimedOrUnreadable(deliveryId, row, webhook, attemptNumber, leaseUntil, options);
  });
}

/**
 * The attempt whose lease expired counts as made and failed: it is recorded as `interrupted` and the
 * next one scheduled like after any failure (`row` is updated in place), or the delivery fails.
 */
async function recordInterrupted(
  client: PoolClient,
  deliveryId: string,
  row: DeliveryRow,
  options: ClaimOptions,
): Promise<"failed" | "rescheduled"> {
  const attemptNumber = row.attempts_made;
  const attemptedAt = row.attempt_started_at ?? row.lease_until ?? options.now;
  if (attemptNumber >= 1) {
    await client.query(
      `INSERT INTO webhook_attempts
            (delivery_id, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
     VALUES ($1, $2, $3, NULL, 'interrupted', 0, $4)
     ON CONFLICT (delivery_id, series, attempt_number) DO NOTHING`,
      [deliveryId, row.bot_id, attemptNumber, attemptedAt],
    );
  }
  const delay = attemptNumber >= 1 ? retryDelayMs(options.retryDelays, attemptNumber) : 0;
  if (delay === null) {
    await finish(client, deliveryId, "failed", options.now);
    return "failed";
  }
  const nextAttemptAt = new Date(options.now.getTime() + delay);
  await client.query(
    `UPDATE webhook_deliveries
        SET lease_until = NULL, attempt_started_at = NULL, next_attempt_at = $2, updated_at = $3
      WHERE id = $1`,
    [deliveryId, nextAttemptAt, options.now],
  );
  row.lease_until = null;
  row.attempt_started_at = null;
  row.next_attempt_at = nextAttemptAt;
  return "rescheduled";
}

async function finish(
  client: PoolClient,
  deliveryId: string,
  state: "delivered" | "failed",
  now: Date,
  failureReason: string | null = null,
): Promise<void> {
  await client.query(
    `UPDATE webhook_deliveries
        SET state = $2, completed_at = $3, lease_until = NULL, attempt_started_at = NULL, updated_at = $3,
            failure_reason = $4
      WHERE id = $1`,
    [deliveryId, state, now, failureReason],
  );
}

export interface RecordInput {
  deliveryId: string;
  botId: string;
  attemptNumber: number;
  leaseUntil: Date;
  attemptedAt: Date;
  outcome: AttemptOutcome;
  now: Date;
  retryDelays: RetryDelays;
  /** The delivery ends `failed` whatever attempt this is (a secret no key decrypts). */
  final?: boolean;
}

/**
 * The record statements: the function botdir_record_attempts (migration
 * 20261125130000_dispatcher_lock_then_write) locks the delivery rows, then writes each delivery's
 * new state only while the claim is still ours (same attempt number and lease) and the attempt row
 * only if that update happened; it returns, for each row it locked, whether the attempt was
 * recorded (false: the claim was taken over). One array per column, element i = attempt i.
 *
 * RECORD_SQL records one attempt, waiting for its row lock. RECORD_BATCH_SQL records many and, like
 * CLAIM_BATCH_SQL, skips rows locked elsewhere, so it never waits for a lock; an attempt whose row
 * it did not lock is recorded on its own with RECORD_SQL.
 */
const RECORD_SQL = `
SELECT recorded
  FROM botdir_record_attempts(true, ARRAY[$1::uuid], ARRAY[$2::int], ARRAY[$3::timestamptz], ARRAY[$4::text],
                              ARRAY[$5::timestamptz], ARRAY[$6::timestamptz], ARRAY[$7::timestamptz],
                              ARRAY[$8::varchar], ARRAY[$9::int], ARRAY[$10::text], ARRAY[$11::int],
                              ARRAY[$12::timestamptz])`;

/** What recording `input` writes, and what it means when it is written. */
function planRecord(input: RecordInput): { result: RecordResult; state: "pending" | "delivered" | "failed" } {
  const { outcome, now } = input;
  const delay = outcome.ok || input.final ? null : retryDelayMs(input.retryDelays, input.attemptNumber);
  const result: RecordResult = outcome.ok
    ? { kind: "delivered" }
    : delay === null
      ? { kind: "failed" }
      : { kind: "retry", nextAttemptAt: new Date(now.getTime() + delay) };
  return { result, state: result.kind === "retry" ? "pending" : result.kind };
}

/** What recording `input` means once it is written. */
export function plannedResult(input: RecordInput): RecordResult {
  return planRecord(input).result;
}

/**
 * Whether this very attempt is already recorded: after a record statement that failed on the way
 * back (committed, but the reply was lost), the retry finds the claim gone and must not mistake
 * its own write for a takeover. The attempt row matches on number, time and error kind.
 */
export async function attemptRecorded(db: Db, input: RecordInput): Promise<boolean> {
  const { rows } = await db.pool.query(
    `SELECT 1 FROM webhook_attempts
      WHERE delivery_id = $1 AND attempt_number = $2 AND attempted_at = $3
        AND error_kind IS NOT DISTINCT FROM $4`,
    [input.deliveryId, input.attemptNumber, input.attemptedAt, input.outcome.errorKind],
  );
  return rows.length > 0;
}

export async function recordAttempt(db: Db, input: RecordInput): Promise<RecordResult> {
  const { outcome, now } = input;
  const { result, state } = planRecord(input);
  const { rows } = await db.pool.query<{ recorded: boolean }>({
    name: "dispatcher_record",
    text: RECORD_SQL,
    values: [
      input.deliveryId,
      input.attemptNumber,
      input.leaseUntil,
      state,
      result.kind === "retry" ? result.nextAttemptAt : null,
      result.kind === "retry" ? null : now,
      now,
      input.botId,
      outcome.statusCode,
      outcome.errorKind,
      outcome.durationMs,
      input.attemptedAt,
    ],
  });
  return rows[0]?.recorded === true ? result : { kind: "superseded" };
}

const RECORD_BATCH_SQL = `
SELECT id, recorded
  FROM botdir_record_attempts(false, $1::uuid[], $2::int[], $3::timestamptz[], $4::text[], $5::timestamptz[],
                              $6::timestamptz[], $7::timestamptz[], $8::varchar[], $9::int[], $10::text[],
                              $11::int[], $12::timestamptz[])`;

/** Records several attempts (of different deliveries) in one statement; see RECORD_BATCH_SQL. */
async function recordAttempts(db: Db, inputs: readonly RecordInput[]): Promise<(RecordResult | "skipped")[]> {
  const plans = inputs.map(planRecord);
  const column = <T>(pick: (input: RecordInput, i: number) => T): T[] => inputs.map(pick);
  const { rows } = await db.pool.query<{ id: string; recorded: boolean }>({
    name: "dispatcher_record_batch",
    text: RECORD_BATCH_SQL,
    values: [
      column((x) => x.deliveryId),
      column((x) => x.attemptNumber),
      column((x) => x.leaseUntil),
      column((_, i) => plans[i]?.state),
      column((_, i) => {
        const result = plans[i]?.result;
        return result?.kind === "retry" ? result.nextAttemptAt : null;
      }),
      column((x, i) => (plans[i]?.result.kind === "retry" ? null : x.now)),
      column((x) => x.now),
      column((x) => x.botId),
      column((x) => x.outcome.statusCode),
      column((x) => x.outcome.errorKind),
      column((x) => x.outcome.durationMs),
      column((x) => x.attemptedAt),
    ],
  });
  const recorded = new Map(rows.map((row) => [row.id, row.recorded]));
  return inputs.map((input, i) => {
    const locked = recorded.get(input.deliveryId);
    if (locked === undefined) return "skipped";
    return locked ? (plans[i] as { result: RecordResult }).result : { kind: "superseded" };
  });
}

/**
 * How the claims and records of the attempts in flight share statements: maxBatch attempts per
 * statement (DISPATCHER_DB_BATCH_MAX; 1 sends one statement per attempt), maxInFlight statements of
 * each kind at once (DISPATCHER_DB_BATCH_IN_FLIGHT).
 */
export type DeliveryStoreOptions = BatchLimits;

/** Claims and records attempts; concurrent calls share statements (createBatcher, @botdir/schema). */
export interface DeliveryStore {
  claim(deliveryId: string, options: ClaimOptions): Promise<ClaimResult>;
  record(input: RecordInput): Promise<RecordResult>;
}

type ClaimItem = { deliveryId: string; options: ClaimOptions };
/** What a claim batch found for one delivery: its row, or "skipped" (locked elsewhere, or absent). */
type ClaimFound = { row: ClaimRow | undefined | "skipped"; options: ClaimOptions };

export function createDeliveryStore(db: Db, options: DeliveryStoreOptions): DeliveryStore {
  if (options.maxBatch <= 1) {
    return {
      claim: (deliveryId, claimOptions) => claimAttempt(db, deliveryId, claimOptions),
      record: (input) => recordAttempt(db, input),
    };
  }
  const claimBatch = createBatcher<ClaimItem, ClaimFound>({
    maxBatch: options.maxBatch,
    maxInFlight: options.maxInFlight,
    conflictKey: (item) => item.deliveryId,
    // A failed statement fails each job of its batch (BullMQ retries them), as one statement would;
    // PostgreSQL being down is not waited for twice.
    isolateFailures: false,
    async run(items) {
      // One clock reading for the whole batch: the latest of its items' (they differ by < 1 ms).
      const latest = items.reduce((a, b) => (b.options.now > a.options.now ? b : a)).options;
      if (items.length === 1) {
        const { leaseUntil, dueBy } = claimTimes(latest);
        const { rows } = await db.pool.query<ClaimRow>({
          name: "dispatcher_claim",
          text: CLAIM_SQL,
          values: [items[0]?.deliveryId, leaseUntil, latest.now, dueBy, WEBHOOK_MAX_ATTEMPTS],
        });
        return [{ row: rows[0], options: latest }];
      }
      const { leaseUntil, dueBy } = claimTimes(latest);
      const { rows } = await db.pool.query<ClaimRow & { id: string }>({
        name: "dispatcher_claim_batch",
        text: CLAIM_BATCH_SQL,
        values: [items.map((item) => item.deliveryId), leaseUntil, latest.now, dueBy, WEBHOOK_MAX_ATTEMPTS],
      });
      const found = new Map(rows.map((row) => [row.id, row]));
      return items.map((item) => ({ row: found.get(item.deliveryId) ?? "skipped", options: latest }));
    },
  });
  const recordBatch = createBatcher<RecordInput, RecordResult | "skipped">({
    maxBatch: options.maxBatch,
    maxInFlight: options.maxInFlight,
    conflictKey: (input) => input.deliveryId,
    isolateFailures: false,
    run: (inputs) =>
      inputs.length === 1
        ? recordAttempt(db, inputs[0] as RecordInput).then((r) => [r])
        : recordAttempts(db, inputs),
  });
  return {
    async claim(deliveryId, claimOptions) {
      const { row, options: used } = await claimBatch({ deliveryId, options: claimOptions });
      // Locked by someone else (or not there): the one-row statement waits for the lock and sees.
      if (row === "skipped") return claimAttempt(db, deliveryId, claimOptions);
      return settleClaim(db, deliveryId, row, used);
    },
    async record(input) {
      const result = await recordBatch(input);
      return result === "skipped" ? recordAttempt(db, input) : result;
    },
  };
}

/** The bot of a delivery, for a job that does not name it (one handed off before jobs did). */
export async function botOfDelivery(db: Db, deliveryId: string): Promise<string | null> {
  const { rows } = await db.pool.query<{ bot_id: string }>({
    name: "dispatcher_bot_of_delivery",
    text: "SELECT bot_id FROM webhook_deliveries WHERE id = $1",
    values: [deliveryId],
  });
  return rows[0]?.bot_id ?? null;
}

const NIL_UUID = "00000000-0000-0000-0000-000000000000";

/**
 * Opens up to `connections` pool connections and prepares the claim and record statements (one-row
 * and batch) on each (against the nil id, so nothing is locked or written), so the first burst of
 * jobs after start-up does not pay for connection set-up and planning. Failures are ignored: the pool connects lazily.
 */
export async function warmUp(db: Db, connections: number): Promise<void> {
  const clients = await Promise.all(
    Array.from({ length: connections }, () => db.pool.connect().catch(() => null)),
  );
  await Promise.all(
    clients.map(async (client) => {
      if (!client) return;
      try {
        const now = new Date();
        await client.query({
          name: "dispatcher_claim",
          text: CLAIM_SQL,
          values: [NIL_UUID, now, now, now, 0],
        });
        await client.query({
          name: "dispatcher_record",
          text: RECORD_SQL,
          values: [NIL_UUID, 0, now, "pending", null, null, now, "", null, null, 0, now],
        });
        await client.query({
          name: "dispatcher_claim_batch",
          text: CLAIM_BATCH_SQL,
          values: [[NIL_UUID], now, now, now, 0],
        });
        const none = [null];
        await client.query({
          name: "dispatcher_record_batch",
          text: RECORD_BATCH_SQL,
          values: [[NIL_UUID], [0], [now], ["pending"], none, none, [now], [""], none, none, [0], [now]],
        });
      } catch {
        // best effort
      } finally {
        client.release();
      }
    }),
  );
}

/** The claim and record statements, for the plan tests (test/plans.test.ts). */
export const STATEMENTS = { CLAIM_SQL, CLAIM_BATCH_SQL, RECORD_SQL, RECORD_BATCH_SQL } as const;
