/**
 * Casting a vote: the one code path behind POST /internal/v1/votes and `botctl vote cast`.
 *
 * One SQL statement (one round trip, one implicit transaction) writes the window record, appends to
 * the vote log and, when the bot's webhook subscribes to `vote.create`, creates the outbox row. When
 * it subscribes to `vote.available`, the window row's remind_at is its end (voted_at + 12 h): the
 * reminder scheduler (outbox/reminders.ts) makes that delivery then. The database enforces
 * "one vote per user per bot per 12 hours": the upsert's row lock serialises concurrent votes and
 * its WHERE re-checks the window on the latest committed row, so exactly one of N concurrent votes
 * writes anything. After commit the delivery is handed to BullMQ; if that fails the relay does it.
 *
 * Concurrent votes are cast together (createBatcher): the votes of one event-loop turn go into one
 * multi-row statement, so PostgreSQL commits (and flushes its WAL) once per batch, not per vote.
 * Two votes of the same user for the same bot never share a batch, and each vote is answered only
 * after the commit of its batch, so every 2xx is still durable.
 *
 * The widget's per-hour vote counters (vote_counts) are written inside this same statement by the
 * log's statement-level insert trigger (migration 20261122030000_vote_counters): one aggregated
 * upsert per batch, and no writer of the log can forget them.
 */
import { type BatchLimits, createBatcher, DEFAULT_BATCH_LIMITS } from "@botdir/batcher";
import { type Db, deliveryTraceparent, isRetryableConflict, newDeliveryId } from "@botdir/db";
import { ApiError, MESSAGES, VOTE_WINDOW_MS } from "@botdir/schema";
import {
  activeTraceparent,
  type Clock,
  inSpan,
  type Logger,
  SpanKind,
  storedTraceLogFields,
} from "@botdir/service-kit";
import type { DeliveryQueue } from "../outbox/queue.js";

export interface VotesDeps {
  db: Db;
  clock: Clock;
  logger: Logger;
  /** Absent: no immediate hand-off, the outbox relay hands every delivery off. */
  deliveryQueue?: DeliveryQueue | undefined;
  /** Statements in flight and votes per statement (default DEFAULT_BATCH_LIMITS). */
  batching?: BatchLimits;
  /** Called with the size of every statement's batch (metrics). */
  onBatch?: (size: number) => void;
}

export interface CastVoteResult {
  vote: { user_id: string; voted_at: string };
  nextVoteAt: string;
}

export interface CastVoteOutcome extends CastVoteResult {
  /** The outbox row created with the vote, or null when the bot's webhook does not take vote.create. */
  deliveryId: string | null;
}

export const ALREADY_VOTED = "The user has already voted for this bot in the last 12 hours.";

// A batch of votes: $1 bot ids, $2 user ids, $3 the vote instants (ISO, ms), $4 the delivery ids to
// use, $5 the W3C context each vote was cast under (kept on its delivery row: docs/tracing.md),
// $6 the vote page's query string (JSON text or null, kept on the log row) (arrays, one element per vote; no (bot, user) pair twice). Each vote's id is drawn first so
// its window row can point at the log row it belongs to; a vote refused by the window only leaves a
// gap in the sequence. `window_voted_at` is read with the statement's snapshot: it is null when a
// concurrent vote that committed after the snapshot is the one that won; the caller then reads it
// again. Window rows are written in (bot, user) order and bots rows are only key-share locked
// (foreign keys), in that order too, so batches in flight never deadlock each other or the API's
// writes.
const CAST_VOTE_SQL = `
WITH input AS (
  SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::timestamptz[], $4::uuid[], $5::varchar[], $6::jsonb[])
    WITH ORDINALITY AS t(bot_id, user_id, voted_at, delivery_id, traceparent, query, i)
), bot AS (
  SELECT input.i,
         b.webhook_url IS NOT NULL AND b.webhook_disabled_at IS NULL
           AND 'vote.create' = ANY(b.webhook_events) AS sends_create,
         b.webhook_url IS NOT NULL AND b.webhook_disabled_at IS NULL
           AND 'vote.available' = ANY(b.webhook_events) AS sends_available
    FROM input JOIN bots b ON b.id = input.bot_id AND b.status = 'approved'
), next_vote AS (
  SELECT bot.i, nextval('vote_log_id_seq'::regclass) AS id FROM bot
), win AS (
  INSERT INTO vote_windows AS w (bot_id, user_id, voted_at, vote_id, remind_at)
  SELECT input.bot_id, input.user_id, input.voted_at, next_vote.id,
         CASE WHEN bot.sends_available
              THEN input.voted_at + interval '${VOTE_WINDOW_MS} milliseconds' END
    FROM input JOIN next_vote ON next_vote.i = input.i JOIN bot ON bot.i = input.i
   ORDER BY input.bot_id, input.user_id
  ON CONFLICT (bot_id, user_id) DO UPDATE
     SET voted_at = EXCLUDED.voted_at, vote_id = EXCLUDED.vote_id, remind_at = EXCLUDED.remind_at
   WHERE w.voted_at <= EXCLUDED.voted_at - interval '${VOTE_WINDOW_MS} milliseconds'
  RETURNING w.vote_id
), logged AS (
  INSERT INTO vote_log (id, bot_id, user_id, voted_at, query)
  SELECT win.vote_id, input.bot_id, input.user_id, input.voted_at, input.query
    FROM win JOIN next_vote ON next_vote.id = win.vote_id JOIN input ON input.i = next_vote.i
   ORDER BY input.bot_id, input.user_id
  RETURNING id
), delivery AS (
  INSERT INTO webhook_deliveries
         (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at, updated_at, traceparent)
  SELECT input.delivery_id, input.bot_id, logged.id, 'pending', 0, input.voted_at, input.voted_at, input.voted_at,
         input.traceparent
    FROM logged
    JOIN next_vote ON next_vote.id = logged.id
    JOIN input ON input.i = next_vote.i
    JOIN bot ON bot.i = input.i
   WHERE bot.sends_create
   ORDER BY input.bot_id, input.user_id
  RETURNING id, vote_id
)
SELECT input.i,
       bot.i IS NOT NULL AS bot_found,
       COALESCE(bot.sends_create, false) AS sends_create,
       logged.id AS vote_id,
       delivery.id AS delivery_id,
       (SELECT w.voted_at FROM vote_windows w
         WHERE w.bot_id = input.bot_id AND w.user_id = input.user_id) AS window_voted_at
  FROM input
  LEFT JOIN bot ON bot.i = input.i
  LEFT JOIN next_vote ON next_vote.i = input.i
  LEFT JOIN logged ON logged.id = next_vote.id
  LEFT JOIN delivery ON delivery.vote_id = logged.id`;

interface CastInput {
  botId: string;
  userId: string;
  votedAt: string;
  deliveryId: string;
  traceparent: string | null;
  /** The vote page's query string as JSON text, or null. */
  query: string | null;
  /**
   * Set when a statement carrying this vote failed: its answer may have been lost after it
   * committed (node-postgres' query timeout while PostgreSQL stalled), so the vote may be recorded.
   */
  earlierRunFailed?: boolean;
}

interface CastRow {
  bot_found: boolean;
  /** The bot's webhook takes vote.create: a recorded vote has a delivery row. */
  sends_create: boolean;
  vote_id: number | null;
  delivery_id: string | null;
  window_voted_at: Date | null;
}

const nextVoteAt = (votedAt: Date) => new Date(votedAt.getTime() + VOTE_WINDOW_MS).toISOString();

export function createVotes(deps: VotesDeps) {
  const { db, clock, logger } = deps;
  const cast = createBatcher<CastInput, CastRow>({
    ...(deps.batching ?? DEFAULT_BATCH_LIMITS),
    conflictKey: (vote) => `${vote.botId}:${vote.userId}`,
    retryAlone: isRetryableConflict,
    onBatch: deps.onBatch,
    run: async (votes) => {
      // Named: PostgreSQL parses and plans the statement once per connection.
      const { rows } = await db.pool
        .query<CastRow & { i: string }>({
          name: "ingest.cast-vote",
          text: CAST_VOTE_SQL,
          values: [
            votes.map((v) => v.botId),
            votes.map((v) => v.userId),
            votes.map((v) => v.votedAt),
            votes.map((v) => v.deliveryId),
            votes.map((v) => v.traceparent),
            votes.map((v) => v.query),
          ],
        })
        .catch((error: unknown) => {
          for (const vote of votes) vote.earlierRunFailed = true;
          throw error;
        });
      const answers: CastRow[] = votes.map(() => ({
        bot_found: false,
        sends_create: false,
        vote_id: null,
        delivery_id: null,
        window_voted_at: null,
      }));
      for (const row of rows) answers[Number(row.i) - 1] = row;
      return answers;
    },
  });

  async function currentWindow(botId: string, userId: string): Promise<Date | null> {
    const { rows } = await db.pool.query<{ voted_at: Date }>(
      "SELECT voted_at FROM vote_windows WHERE bot_id = $1 AND user_id = $2",
      [botId, userId],
    );
    return rows[0]?.voted_at ?? null;
  }

  async function deliveryExists(id: string): Promise<boolean> {
    const { rows } = await db.pool.query("SELECT 1 FROM webhook_deliveries WHERE id = $1", [id]);
    return rows.length > 0;
  }

  return {
    /**
     * Records a vote of `userId` for `botId` (ids already validated), or throws 404 (unknown or
     * unapproved bot) or 409 with `nextVoteAt` (inside the window; nothing written).
     */
    async castVote(
      botId: string,
      userId: string,
      /**
       * The vote's context (the request's server span, requestKeptTraceparent; default: the active
       * span's, as for `botctl vote cast`): its delivery row keeps it, so every hand-off and attempt
       * of the delivery continues this trace. Null (nothing exported, no `traceparent` sent): the
       * row keeps none and the delivery's trace is the one its id names (deliveryTraceparent).
       */
      traceparent: string | null = activeTraceparent(),
      /**
       * The vote page's query string (VoteQuery, already validated): kept with the vote and sent
       * in its vote.create as `query`. Null or empty: none (the event has no `query`).
       */
      query: Readonly<Record<string, string>> | null = null,
    ): Promise<CastVoteOutcome> {
      // Milliseconds: the column is timestamptz(3), and the instant is the same everywhere.
      const now = clock.now();
      const votedAt = now.toISOString();
      const deliveryId = newDeliveryId();
      // The statement is shared by the votes of one turn (createBatcher): this span is this vote's
      // wait for it, with the statement's batch size.
      const input: CastInput = {
        botId,
        userId,
        votedAt,
        deliveryId,
        traceparent,
        query: query && Object.keys(query).length > 0 ? JSON.stringify(query) : null,
      };
      const row = await inSpan(
        "pg.cast_vote",
        {
          kind: SpanKind.CLIENT,
          attributes: {
            "db.system.name": "postgresql",
            "db.operation.name": "cast_vote",
            "botdir.bot_id": botId,
          },
          leaf: true,
        },
        () => cast(input),
      );
      if (!row.bot_found) throw new ApiError("not_found", MESSAGES.botNotFound);

      let recordedDeliveryId = row.delivery_id;
      if (row.vote_id === null) {
        // The statement's snapshot may predate the concurrent vote that won (null, or the old,
        // expired window): then read the committed window again.
        let windowStart = row.window_voted_at;
        if (!windowStart || windowStart.getTime() + VOTE_WINDOW_MS <= now.getTime()) {
          windowStart = await currentWindow(botId, userId);
        }
        // Window rows are never deleted, so a refused upsert always has one; be explicit anyway.
        if (!windowStart) throw new Error("vote refused but no vote window found");
        // This very vote, recorded by an earlier run of its statement whose answer was lost (the
        // client's query timeout while PostgreSQL stalled, the statement committing after it; the
        // batcher then ran the vote again alone): its window has this vote's instant and, when the
        // bot takes vote.create, its delivery row this vote's id. It was recorded once, and is
        // answered as recorded. Without a delivery row to tell, a vote of the same user at the
        // same millisecond recorded by another request while this one's statement failed would be
        // taken for it: the user did vote then, and only that one is delivered.
        const recorded =
          input.earlierRunFailed === true &&
          windowStart.getTime() === now.getTime() &&
          (!row.sends_create || (await deliveryExists(deliveryId)));
        if (!recorded) {
          throw ApiError.conflict("already_voted", ALREADY_VOTED, { nextVoteAt: nextVoteAt(windowStart) });
        }
        recordedDeliveryId = row.sends_create ? deliveryId : null;
      }

      if (recordedDeliveryId && deps.deliveryQueue) {
        const handed = await deps.deliveryQueue.handOff(
          {
            id: recordedDeliveryId,
            botId,
            attemptsMade: 0,
            nextAttemptAt: now,
            ...(traceparent ? { traceparent } : {}),
          },
          now,
        );
        if (!handed) {
          logger.warn(
            {
              deliveryId: recordedDeliveryId,
              ...storedTraceLogFields(traceparent ?? deliveryTraceparent(recordedDeliveryId)),
            },
            "queue unavailable; the outbox relay will hand off",
          );
        }
      }

      return {
        vote: { user_id: userId, voted_at: votedAt },
        nextVoteAt: nextVoteAt(now),
        deliveryId: recordedDeliveryId,
      };
    },
  };
}

export type Votes = ReturnType<typeof createVotes>;
