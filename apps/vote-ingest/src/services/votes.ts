/**
 * Casting a vote: the one code path behind POST /internal/v1/votes and `botctl vote cast`.
 *
 * One SQL statement (one round trip, one implicit transaction) writes the window record, appends to
 * the vote log and, when the bot has a webhook URL, creates the outbox row. The database enforces
 * "one vote per user per bot per 12 hours": the upsert's row lock serialises concurrent votes and
 * its WHERE re-checks the window on the latest committed row, so exactly one of N concurrent votes
 * writes anything. After commit the delivery is handed to BullMQ; if that fails the relay does it.
 */
import { randomUUID } from "node:crypto";
import type { Db } from "@botdir/db";
import { ApiError, type Clock, type Logger, MESSAGES, VOTE_WINDOW_MS } from "@botdir/schema";
import type { DeliveryQueue } from "../outbox/queue.js";

export interface VotesDeps {
  db: Db;
  clock: Clock;
  logger: Logger;
  /** Absent: no immediate hand-off, the outbox relay hands every delivery off. */
  deliveryQueue?: DeliveryQueue | undefined;
}

export interface CastVoteResult {
  vote: { user_id: string; voted_at: string };
  nextVoteAt: string;
}

export interface CastVoteOutcome extends CastVoteResult {
  /** The outbox row created with the vote, or null when the bot has no webhook URL. */
  deliveryId: string | null;
}

export const ALREADY_VOTED = "The user has already voted for this bot in the last 12 hours.";

// $1 bot id, $2 user id, $3 the vote instant (ISO, ms), $4 the delivery id to use.
// The vote id is drawn first so the window row can point at the log row it belongs to; a vote
// refused by the window only leaves a gap in the sequence.
// `window_voted_at` is read with the statement's snapshot: it is null when a concurrent vote that
// committed after the snapshot is the one that won; the caller then reads it again.
const CAST_VOTE_SQL = `
WITH bot AS (
  SELECT id, webhook_url IS NOT NULL AS has_webhook
    FROM bots WHERE id = $1 AND status = 'approved'
), next_vote AS (
  SELECT nextval('vote_log_id_seq'::regclass) AS id FROM bot
), win AS (
  INSERT INTO vote_windows AS w (bot_id, user_id, voted_at, vote_id)
  SELECT bot.id, $2, $3::timestamptz, next_vote.id FROM bot, next_vote
  ON CONFLICT (bot_id, user_id) DO UPDATE
     SET voted_at = EXCLUDED.voted_at, vote_id = EXCLUDED.vote_id
   WHERE w.voted_at <= EXCLUDED.voted_at - interval '${VOTE_WINDOW_MS} milliseconds'
  RETURNING w.vote_id
), logged AS (
  INSERT INTO vote_log (id, bot_id, user_id, voted_at)
  SELECT win.vote_id, $1, $2, $3::timestamptz FROM win
  RETURNING id
), delivery AS (
  INSERT INTO webhook_deliveries
         (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at, updated_at)
  SELECT $4::uuid, $1, logged.id, 'pending', 0, $3::timestamptz, $3::timestamptz, $3::timestamptz
    FROM logged, bot WHERE bot.has_webhook
  RETURNING id
)
SELECT EXISTS (SELECT 1 FROM bot) AS bot_found,
       (SELECT id FROM logged) AS vote_id,
       (SELECT id FROM delivery) AS delivery_id,
       (SELECT voted_at FROM vote_windows WHERE bot_id = $1 AND user_id = $2) AS window_voted_at`;

interface CastRow {
  bot_found: boolean;
  vote_id: number | null;
  delivery_id: string | null;
  window_voted_at: Date | null;
}

const nextVoteAt = (votedAt: Date) => new Date(votedAt.getTime() + VOTE_WINDOW_MS).toISOString();

export function createVotes(deps: VotesDeps) {
  const { db, clock, logger } = deps;

  async function currentWindow(botId: string, userId: string): Promise<Date | null> {
    const { rows } = await db.pool.query<{ voted_at: Date }>(
      "SELECT voted_at FROM vote_windows WHERE bot_id = $1 AND user_id = $2",
      [botId, userId],
    );
    return rows[0]?.voted_at ?? null;
  }

  return {
    /**
     * Records a vote of `userId` for `botId` (ids already validated), or throws 404 (unknown or
     * unapproved bot) or 409 with `nextVoteAt` (inside the window; nothing written).
     */
    async castVote(botId: string, userId: string): Promise<CastVoteOutcome> {
      // Milliseconds: the column is timestamptz(3), and the instant is the same everywhere.
      const now = clock.now();
      const votedAt = now.toISOString();
      // Named: PostgreSQL parses and plans the statement once per connection.
      const { rows } = await db.pool.query<CastRow>({
        name: "ingest.cast-vote",
        text: CAST_VOTE_SQL,
        values: [botId, userId, votedAt, randomUUID()],
      });
      const row = rows[0];
      if (!row?.bot_found) throw new ApiError("not_found", MESSAGES.botNotFound);

      if (row.vote_id === null) {
        // The statement's snapshot may predate the concurrent vote that won (null, or the old,
        // expired window): then read the committed window again.
        let windowStart = row.window_voted_at;
        if (!windowStart || windowStart.getTime() + VOTE_WINDOW_MS <= now.getTime()) {
          windowStart = await currentWindow(botId, userId);
        }
        // Window rows are never deleted, so a refused upsert always has one; be explicit anyway.
        if (!windowStart) throw new Error("vote refused but no vote window found");
        throw new ApiError("conflict", ALREADY_VOTED, { nextVoteAt: nextVoteAt(windowStart) });
      }

      if (row.delivery_id && deps.deliveryQueue) {
        const handed = await deps.deliveryQueue.handOff(
          { id: row.delivery_id, attemptsMade: 0, nextAttemptAt: now },
          now,
        );
        if (!handed) {
          logger.warn({ deliveryId: row.delivery_id }, "queue unavailable; the outbox relay will hand off");
        }
      }

      return {
        vote: { user_id: userId, voted_at: votedAt },
        nextVoteAt: nextVoteAt(now),
        deliveryId: row.delivery_id,
      };
    },
  };
}

export type Votes = ReturnType<typeof createVotes>;
