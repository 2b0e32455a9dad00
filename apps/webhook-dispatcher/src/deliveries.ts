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
 * - otherwise: attempts_made + 1, lease = now + leaseMs   -> claimed, attempt number = attempts_made.
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
import type { Db } from "@botdir/db";
import { WEBHOOK_MAX_ATTEMPTS } from "@botdir/schema";
import type { AttemptOutcome } from "./http-client.js";
import { type RetryDelays, retryDelayMs } from "./schedule.js";

export interface DeliveryTarget {
  deliveryId: string;
  botId: string;
  userId: string;
  votedAt: Date;
  url: string;
  /** Decrypted right after the claim: a secret that cannot be decrypted gives the claim back. */
  secret: string;
}

export type ClaimResult =
  | { kind: "done"; reason: "not_found" | "delivered" | "failed" | "no_webhook" | "exhausted" }
  | { kind: "busy"; until: Date }
  | { kind: "early"; at: Date }
  | { kind: "claimed"; attemptNumber: number; leaseUntil: Date; target: DeliveryTarget };

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
  /** Decrypts bots.webhook_secret_encrypted; throwing releases the claim (no attempt used). */
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
  webhook_url: string | null;
  webhook_secret_encrypted: string | null;
}

async function inTransaction<T>(db: Db, work: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * The common path of a claim in one statement. `d` locks the delivery row (waiting for a concurrent
 * claim to commit, then seeing its result); `c` claims it only when every condition of a claim holds
 * on the newest row version; the outer SELECT returns what the handler needs and, when nothing was
 * claimed, the row as locked so the caller can tell busy / early / not pending / a rare branch apart.
 */
const CLAIM_SQL = `
WITH d AS (
  SELECT id, state, attempts_made, next_attempt_at, lease_until, bot_id, vote_id
    FROM webhook_deliveries
   WHERE id = $1
     FOR UPDATE
), c AS (
  UPDATE webhook_deliveries w
     SET attempts_made = w.attempts_made + 1, lease_until = $2, attempt_started_at = $3, updated_at = $3
    FROM d, bots b
   WHERE w.id = d.id
     AND b.id = d.bot_id
     AND w.state = 'pending'
     AND w.lease_until IS NULL
     AND w.attempts_made < $5
     AND w.next_attempt_at <= $4
     AND b.webhook_url IS NOT NULL
     AND b.webhook_secret_encrypted IS NOT NULL
  RETURNING w.attempts_made, b.webhook_url, b.webhook_secret_encrypted
)
SELECT d.state, d.attempts_made, d.next_attempt_at, d.lease_until, d.bot_id, v.user_id, v.voted_at,
       c.attempts_made AS claimed_attempt, c.webhook_url, c.webhook_secret_encrypted
  FROM d
  JOIN vote_log v ON v.id = d.vote_id
  LEFT JOIN c ON true`;

interface ClaimRow {
  state: DeliveryRow["state"];
  attempts_made: number;
  next_attempt_at: Date;
  lease_until: Date | null;
  bot_id: string;
  user_id: string;
  voted_at: Date;
  claimed_attempt: number | null;
  webhook_url: string | null;
  webhook_secret_encrypted: string | null;
}

/** Gives a claim back (its secret could not be decrypted): no attempt is used. */
const RELEASE_SQL = `
UPDATE webhook_deliveries
   SET attempts_made = attempts_made - 1, lease_until = NULL, attempt_started_at = NULL
 WHERE id = $1 AND state = 'pending' AND attempts_made = $2 AND lease_until = $3`;

export async function claimAttempt(db: Db, deliveryId: string, options: ClaimOptions): Promise<ClaimResult> {
  const { now } = options;
  const leaseUntil = new Date(now.getTime() + options.leaseMs);
  const dueBy = new Date(now.getTime() + options.earlySlackMs);
  const { rows } = await db.pool.query<ClaimRow>({
    name: "dispatcher_claim",
    text: CLAIM_SQL,
    values: [deliveryId, leaseUntil, now, dueBy, WEBHOOK_MAX_ATTEMPTS],
  });
  const row = rows[0];
  if (!row) return { kind: "done", reason: "not_found" };
  if (row.claimed_attempt !== null && row.webhook_url && row.webhook_secret_encrypted) {
    const attemptNumber = row.claimed_attempt;
    let secret: string;
    try {
      secret = options.decryptSecret(row.webhook_secret_encrypted);
    } catch (error) {
      await db.pool
        .query({
          name: "dispatcher_release",
          text: RELEASE_SQL,
          values: [deliveryId, attemptNumber, leaseUntil],
        })
        .catch(() => {}); // if even this fails, the lease expires and the attempt counts as interrupted
      throw error;
    }
    return claimed(deliveryId, row, row.webhook_url, attemptNumber, leaseUntil, secret);
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

/** The result of a successful claim: what the attempt sends, and to where. */
function claimed(
  deliveryId: string,
  row: Pick<DeliveryRow, "bot_id" | "user_id" | "voted_at">,
  url: string,
  attemptNumber: number,
  leaseUntil: Date,
  secret: string,
): ClaimResult {
  return {
    kind: "claimed",
    attemptNumber,
    leaseUntil,
    target: { deliveryId, botId: row.bot_id, userId: row.user_id, votedAt: row.voted_at, url, secret },
  };
}

/** Every branch of a claim, in one transaction with the row locked (the rare paths). */
async function claimInTransaction(db: Db, deliveryId: string, options: ClaimOptions): Promise<ClaimResult> {
  const { now } = options;
  return inTransaction(db, async (client) => {
    const found = await client.query<DeliveryRow>(
      `SELECT d.state, d.attempts_made, d.next_attempt_at, d.lease_until, d.attempt_started_at,
              d.bot_id, v.user_id, v.voted_at, b.webhook_url, b.webhook_secret_encrypted
         FROM webhook_deliveries d
         JOIN vote_log v ON v.id = d.vote_id
         JOIN bots b ON b.id = d.bot_id
        WHERE d.id = $1
          FOR UPDATE OF d`,
      [deliveryId],
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
    if (!row.webhook_url || !row.webhook_secret_encrypted) {
      await finish(client, deliveryId, "failed", now);
      return { kind: "done", reason: "no_webhook" };
    }

    const secret = options.decryptSecret(row.webhook_secret_encrypted);
    const attemptNumber = row.attempts_made + 1;
    const leaseUntil = new Date(now.getTime() + options.leaseMs);
    await client.query(
      `UPDATE webhook_deliveries
          SET attempts_made = $2, lease_until = $3, attempt_started_at = $4, updated_at = $4
        WHERE id = $1`,
      [deliveryId, attemptNumber, leaseUntil, now],
    );
    return claimed(deliveryId, row, row.webhook_url, attemptNumber, leaseUntil, secret);
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
     ON CONFLICT (delivery_id, attempt_number) DO NOTHING`,
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
): Promise<void> {
  await client.query(
    `UPDATE webhook_deliveries
        SET state = $2, completed_at = $3, lease_until = NULL, attempt_started_at = NULL, updated_at = $3
      WHERE id = $1`,
    [deliveryId, state, now],
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
}

/**
 * One statement: the delivery's new state only while the claim is ours, and the attempt row only if
 * that update happened (`a` reads `u`'s output); `recorded` is 0 when the claim was taken over.
 */
const RECORD_SQL = `
WITH u AS (
  UPDATE webhook_deliveries
     SET state = $4,
         next_attempt_at = COALESCE($5, next_attempt_at),
         completed_at = $6,
         lease_until = NULL,
         attempt_started_at = NULL,
         updated_at = $7
   WHERE id = $1 AND state = 'pending' AND attempts_made = $2 AND lease_until = $3
  RETURNING id
), a AS (
  INSERT INTO webhook_attempts
         (delivery_id, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
  SELECT u.id, $8::varchar, $2, $9::int, $10::text, $11::int, $12::timestamptz FROM u
)
SELECT count(*)::int AS recorded FROM u`;

export async function recordAttempt(db: Db, input: RecordInput): Promise<RecordResult> {
  const { outcome, now } = input;
  const delay = outcome.ok ? null : retryDelayMs(input.retryDelays, input.attemptNumber);
  const result: RecordResult = outcome.ok
    ? { kind: "delivered" }
    : delay === null
      ? { kind: "failed" }
      : { kind: "retry", nextAttemptAt: new Date(now.getTime() + delay) };
  const state = result.kind === "retry" ? "pending" : result.kind;
  const { rows } = await db.pool.query<{ recorded: number }>({
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
  return rows[0]?.recorded === 1 ? result : { kind: "superseded" };
}

const NIL_UUID = "00000000-0000-0000-0000-000000000000";

/**
 * Opens up to `connections` pool connections and prepares the claim and record statements on each
 * (against the nil id, so nothing is locked or written), so the first burst of jobs after start-up
 * does not pay for connection set-up and planning. Failures are ignored: the pool connects lazily.
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
      } catch {
        // best effort
      } finally {
        client.release();
      }
    }),
  );
}
