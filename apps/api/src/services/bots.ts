/**
 * The SQL behind the four bot endpoints. Each hot-path query both authenticates (by token hash,
 * through the unique index) and answers, so a request costs at most one database round trip; the
 * /check and /stats statements take arrays and answer the batch of concurrent requests at once.
 * The hot queries are named, so PostgreSQL parses and plans each once per connection. A null
 * `botId` means "the token's own bot" (the top.gg-style routes without an id in the path).
 */
import type { Db } from "@botdir/db";
import { toIso } from "@botdir/db";
import { VOTE_WINDOW_MS, type VoteCheckResult } from "@botdir/schema";

export interface VoteCheckRow {
  botId: string;
  votedAt: Date | null;
}

export interface VoteWindowKey {
  tokenHash: string;
  /**
   * Null when the query string is invalid: the answer is then a 400, but only after 401/404/429
   * have been decided, so the token is still looked up.
   */
  userId: string | null;
}

/**
 * The token's bot and the user's current window, for a batch of concurrent requests
 * (createBatcher, @botdir/schema): one statement whatever the batch size, one answer per key in
 * the keys' order (null: unknown token). Each key costs two index probes (token hash, then the
 * window's primary key).
 */
export async function findVoteWindows(
  db: Pick<Db, "pool">,
  keys: readonly VoteWindowKey[],
): Promise<(VoteCheckRow | null)[]> {
  const { rows } = await db.pool.query<{ i: string; id: string; voted_at: Date | null }>({
    name: "api.check",
    // The window is a scalar subquery so that its probe always uses both primary-key columns
    // (as a join, a generic plan may probe by bot_id alone and filter the bot's windows).
    text: `SELECT q.i, b.id,
            (SELECT w.voted_at FROM vote_windows w WHERE w.bot_id = b.id AND w.user_id = q.user_id) AS voted_at
       FROM unnest($1::char(64)[], $2::varchar[]) WITH ORDINALITY AS q(token_hash, user_id, i)
       JOIN bots b ON b.token_hash = q.token_hash AND b.status = 'approved'`,
    values: [keys.map((k) => k.tokenHash), keys.map((k) => k.userId)],
  });
  const answers: (VoteCheckRow | null)[] = keys.map(() => null);
  for (const row of rows) answers[Number(row.i) - 1] = { botId: row.id, votedAt: row.voted_at };
  return answers;
}

/** Inside the 12-hour window: voted 1 with both timestamps; outside: voted 0 and null timestamps. */
export function toVoteCheck(votedAt: Date | null, now: Date): VoteCheckResult {
  if (votedAt === null || now.getTime() >= votedAt.getTime() + VOTE_WINDOW_MS) {
    return { voted: 0, hasVoted: false, votedAt: null, nextVoteAt: null };
  }
  return {
    voted: 1,
    hasVoted: true,
    votedAt: toIso(votedAt),
    nextVoteAt: toIso(new Date(votedAt.getTime() + VOTE_WINDOW_MS)),
  };
}

export interface VoteLogPage {
  botId: string;
  votes: { user_id: string; voted_at: string }[];
}

/**
 * A vote's voted_at as PostgreSQL formats it: ISO 8601 UTC with milliseconds (what toIso() gives),
 * so a page of 100 votes costs no Date parsing and re-formatting in Node (a third of the profile of
 * GET /votes when Node did it).
 */
const VOTED_AT_ISO = `to_char(v.voted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS voted_at`;

/** The token's bot and its newest `limit` votes from the append-only log, in one query. */
export async function listVotes(db: Db, tokenHash: string, limit: number): Promise<VoteLogPage | null> {
  const { rows } = await db.pool.query<{ id: string; user_id: string | null; voted_at: string | null }>({
    name: "api.votes",
    text: `SELECT b.id, v.user_id, ${VOTED_AT_ISO}
       FROM bots b
       LEFT JOIN LATERAL (
         SELECT l.id AS vote_id, l.user_id, l.voted_at
           FROM vote_log l
          WHERE l.bot_id = b.id
          ORDER BY l.voted_at DESC, l.id DESC
          LIMIT $2
       ) v ON true
      WHERE b.token_hash = $1 AND b.status = 'approved'
      ORDER BY v.voted_at DESC, v.vote_id DESC`,
    values: [tokenHash, limit],
  });
  const first = rows[0];
  if (!first) return null;
  const votes = rows.flatMap((row) =>
    row.user_id !== null && row.voted_at !== null ? [{ user_id: row.user_id, voted_at: row.voted_at }] : [],
  );
  return { botId: first.id, votes };
}

export interface VoteLogRange {
  /** Votes at or after this instant (null: from the start of the log). */
  since: Date | null;
  /** Votes after this position in (voted_at, id) order (null: from `since`). */
  after: { votedAtMs: number; id: string } | null;
  /** Votes at or before this instant only (the settle horizon). */
  until: Date;
  limit: number;
}

export interface VoteLogSlice extends VoteLogPage {
  /** The position of the page's last vote when more votes follow it, else null. */
  next: { votedAtMs: number; id: string } | null;
}

/**
 * The token's bot and the oldest `limit` votes of its log in `range`, oldest first, in one query.
 * A keyset read: the log's index on (bot_id, voted_at DESC, id DESC) INCLUDE (user_id), scanned
 * backward from the range's start, so a page costs `limit` index entries whatever the size of the
 * log or the position in it (an index-only scan; the scale benchmark measures it at 10 M votes).
 * One row more than the page is read to tell whether another page follows.
 */
export async function listVotesSince(
  db: Db,
  tokenHash: string,
  range: VoteLogRange,
): Promise<VoteLogSlice | null> {
  const { rows } = await db.pool.query<{
    id: string;
    vote_id: string | null;
    user_id: string | null;
    voted_at: string | null;
  }>({
    name: "api.votes-since",
    text: `SELECT b.id, v.vote_id, v.user_id, ${VOTED_AT_ISO}
       FROM bots b
       LEFT JOIN LATERAL (
         SELECT l.id AS vote_id, l.user_id, l.voted_at
           FROM vote_log l
          WHERE l.bot_id = b.id
            AND l.voted_at >= $2::timestamptz
            AND (l.voted_at, l.id) > ($3::timestamptz, $4::bigint)
            AND l.voted_at <= $5::timestamptz
          ORDER BY l.voted_at, l.id
          LIMIT $6
       ) v ON true
      WHERE b.token_hash = $1 AND b.status = 'approved'
      ORDER BY v.voted_at, v.vote_id`,
    values: [
      tokenHash,
      range.since === null ? "-infinity" : range.since.toISOString(),
      range.after === null ? "-infinity" : new Date(range.after.votedAtMs).toISOString(),
      range.after === null ? "0" : range.after.id,
      range.until.toISOString(),
      range.limit + 1,
    ],
  });
  const first = rows[0];
  if (!first) return null;
  const found = rows.flatMap((row) =>
    row.vote_id !== null && row.user_id !== null && row.voted_at !== null
      ? [{ id: row.vote_id, user_id: row.user_id, voted_at: row.voted_at }]
      : [],
  );
  const page = found.slice(0, range.limit);
  const last = page.at(-1);
  const next =
    found.length > range.limit && last !== undefined
      ? { votedAtMs: Date.parse(last.voted_at), id: last.id }
      : null;
  return { botId: first.id, votes: page.map(({ user_id, voted_at }) => ({ user_id, voted_at })), next };
}

export interface WriteResult {
  botId: string;
  /** Whether the stored value differs from the one before (drives page-cache invalidation). */
  changed: boolean;
}

export interface StatsWrite {
  tokenHash: string;
  botId: string | null;
  serverCount: number;
  /** A per-shard post: the shard's id, and the shard count when the client sent it. */
  shard?: { id: number; count: number | null } | undefined;
  now: Date;
}

/** A total above this is stored as this (only a hostile sum of shard counts gets there). */
const MAX_TOTAL = Number.MAX_SAFE_INTEGER;

/**
 * Sets the server count and the check-in timestamp (written on every post, even when the count is
 * unchanged) for a batch of concurrent posts (createBatcher, @botdir/schema): one statement that
 * also authenticates, and one commit, for all. Null for a post whose token does not own its
 * `botId` (or is unknown): the caller then works out 401 vs 404.
 *
 * Shards: bot_shard_counts holds each shard's latest count, one row per shard that has posted. A
 * per-shard post writes its own row (and, with a shard count, deletes the rows of the shards at or
 * beyond it), and the bot's server_count becomes the sum of the rows; a post without a shard id
 * deletes them and sets the total it carries. The rows are read once the bot's row is locked, so
 * two shards posting at once each see the other's count, and a post's cost follows the shards
 * that have posted, not its shard id (migration 20261125140000_shard_counts_table).
 *
 * The statement is the function `botdir_write_stats` (migration 20261123150000): one statement
 * locks the bots' rows FOR NO KEY UPDATE (what the UPDATE takes anyway, so it never waits for the
 * key-share locks of vote-ingest's foreign keys), in id order so two batches never deadlock each
 * other; the next one reads the old values and writes, with a snapshot taken after the locks, so
 * `changed` is exact under concurrent posts. Locking and writing in one statement (a locking CTE
 * under the UPDATE) deadlocked with concurrent posts for one bot while its votes were written: the
 * migration says how. The batcher still runs a deadlock victim once more (`retryAlone:
 * isRetryableConflict`, src/app.ts). A batch must not hold two posts of the same token (the
 * batcher's conflict key): a row is updated once per statement.
 */
export async function writeStats(db: Db, inputs: readonly StatsWrite[]): Promise<(WriteResult | null)[]> {
  const { rows } = await db.pool.query<{ i: string; id: string; changed: boolean }>({
    name: "api.stats",
    // Migrations 20261123150000_bot_writes_lock_then_update (locks, rows in id order, then writes)
    // and 20261125140000_shard_counts_table (a row per shard).
    text: "SELECT i, id, changed FROM botdir_write_stats($1::char(64)[], $2::varchar[], $3::bigint[], $4::timestamptz[], $5::int[], $6::int[], $7::bigint)",
    values: [
      inputs.map((x) => x.tokenHash),
      inputs.map((x) => x.botId),
      inputs.map((x) => x.serverCount),
      inputs.map((x) => x.now),
      inputs.map((x) => x.shard?.id ?? null),
      inputs.map((x) => x.shard?.count ?? null),
      MAX_TOTAL,
    ],
  });
  const answers: (WriteResult | null)[] = inputs.map(() => null);
  for (const row of rows) answers[Number(row.i) - 1] = { botId: row.id, changed: row.changed };
  return answers;
}

/** Replaces the command list (as sent, after de-duplication) in one authenticating statement. */
export async function writeCommands(
  db: Db,
  input: { tokenHash: string; botId: string | null; commands: unknown[]; now: Date },
): Promise<WriteResult | null> {
  const { rows } = await db.pool.query<{ id: string; changed: boolean }>({
    name: "api.commands",
    // Migration 20261123150000_bot_writes_lock_then_update: locks, then writes (as writeStats).
    text: "SELECT id, changed FROM botdir_write_commands($1::char(64), $2::varchar, $3::jsonb, $4::timestamptz)",
    values: [input.tokenHash, input.botId, JSON.stringify(input.commands), input.now],
  });
  const row = rows[0];
  return row ? { botId: row.id, changed: row.changed } : null;
}

export interface WidgetCounts {
  /** null until the bot has posted stats. */
  servers: number | null;
  /** Votes cast in the last 30 days. */
  votes: number;
}

export const WIDGET_VOTE_DAYS = 30;
const HOUR_MS = 60 * 60 * 1000;

/**
 * Counts for the public badge; null for an unknown or unapproved bot. "Votes in the last 30 days"
 * are the votes of the log after `now - 30 days`, counted in time independent of their number: the
 * partial first UTC hour from the log (an index range scan of at most one hour of the bot's votes),
 * every later hour from the counters that the log's insert trigger keeps (vote_counts, at most
 * 721 hours × 4 shards of one bot, read by primary key).
 */
export async function widgetCounts(db: Db, botId: string, now: Date): Promise<WidgetCounts | null> {
  const since = now.getTime() - WIDGET_VOTE_DAYS * 24 * HOUR_MS;
  const firstFullHour = Math.floor(since / HOUR_MS) * HOUR_MS + HOUR_MS;
  const { rows } = await db.pool.query<{ server_count: number | null; votes: string }>({
    name: "api.widget",
    text: `SELECT b.server_count,
            (SELECT count(*) FROM vote_log l
              WHERE l.bot_id = b.id AND l.voted_at > $2 AND l.voted_at < $3)
          + (SELECT coalesce(sum(c.votes), 0) FROM vote_counts c
              WHERE c.bot_id = b.id AND c.hour >= $3) AS votes
       FROM bots b
      WHERE b.id = $1 AND b.status = 'approved'`,
    values: [botId, new Date(since), new Date(firstFullHour)],
  });
  const row = rows[0];
  return row ? { servers: row.server_count, votes: Number(row.votes) } : null;
}
