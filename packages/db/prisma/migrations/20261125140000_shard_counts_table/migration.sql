-- Per-shard stats (POST /stats with a shard id) move from an array in the bots row
-- (`bots.shard_counts`, element shard_id + 1) to one row per shard that has posted. With the
-- array, a post for shard 65,535 expanded a 65,536-element array (generate_series) inside the
-- statement that holds other bots' row locks, and every later post of that bot rewrote it: a
-- 60-byte post cost 0.2–0.7 s of PostgreSQL time. Now a post writes its own shard's row, deletes
-- the rows of shards at or beyond a smaller shard_count, and sums the rows of the shards that have
-- posted: the cost follows the shards actually posted (apps/api/test/shards.test.ts).
--
-- The API's answers and the sum are unchanged (docs/api.md, "Per-shard posts"). The rows are
-- written only by botdir_write_stats, after it has locked the bot's row, so two posts of one bot are
-- serialised by that lock and the second statement's snapshot sees the first's shard row.

CREATE TABLE "bot_shard_counts" (
    "bot_id" VARCHAR(19) NOT NULL,
    "shard_id" INTEGER NOT NULL,
    "server_count" BIGINT NOT NULL,

    CONSTRAINT "bot_shard_counts_pkey" PRIMARY KEY ("bot_id", "shard_id")
);

ALTER TABLE "bot_shard_counts" ADD CONSTRAINT "bot_shard_counts_bot_id_fkey"
    FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

INSERT INTO "bot_shard_counts" ("bot_id", "shard_id", "server_count")
SELECT b."id", (s.n - 1)::int, s.c
  FROM "bots" b, unnest(b."shard_counts") WITH ORDINALITY AS s(c, n)
 WHERE s.c IS NOT NULL;

-- A batch of /stats posts: element k of each array is post k (one token at most once per batch).
-- Returns the posts whose token owns their bot (or names none): the post's index (1-based), the
-- bot, and whether its server count changed. Same signature and answers as before; see migration
-- 20261123150000_bot_writes_lock_then_update for why it locks in one statement and writes in the
-- next.
CREATE OR REPLACE FUNCTION "botdir_write_stats"(
    token_hashes char(64)[], bot_ids varchar[], server_counts bigint[], nows timestamptz[],
    shard_ids int[], shard_totals int[], max_total bigint)
RETURNS TABLE (i bigint, id varchar, changed boolean)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1
       FROM unnest(token_hashes, bot_ids) AS q(token_hash, bot_id)
       JOIN bots b ON b.token_hash = q.token_hash AND b.status = 'approved'
                  AND (q.bot_id IS NULL OR b.id = q.bot_id)
      ORDER BY b.id
        FOR NO KEY UPDATE OF b;

    -- The shard rows are read from this statement's snapshot (taken after the locks) and written
    -- in it; the sum is the posted count plus the other shards' rows that stay.
    RETURN QUERY
    WITH q AS (
       SELECT * FROM unnest(token_hashes, bot_ids, server_counts, nows, shard_ids, shard_totals)
         WITH ORDINALITY AS q(token_hash, bot_id, server_count, now, shard_id, shard_count, i)
     ), old AS (
       SELECT b.id, b.server_count AS old_count, q.server_count AS new_count, q.shard_id,
              q.shard_count, q.now, q.i
         FROM q
         JOIN bots b ON b.token_hash = q.token_hash AND b.status = 'approved'
                    AND (q.bot_id IS NULL OR b.id = q.bot_id)
     ), dropped AS (
       -- A post without a shard id clears the shards; a shard_count drops the shards beyond it.
       DELETE FROM bot_shard_counts s
        USING old
        WHERE s.bot_id = old.id
          AND (old.shard_id IS NULL OR s.shard_id >= old.shard_count)
     ), written AS (
       INSERT INTO bot_shard_counts AS s (bot_id, shard_id, server_count)
       SELECT old.id, old.shard_id, old.new_count FROM old WHERE old.shard_id IS NOT NULL
       ON CONFLICT (bot_id, shard_id) DO UPDATE SET server_count = EXCLUDED.server_count
     ), t AS (
       SELECT old.*,
              CASE WHEN old.shard_id IS NULL THEN old.new_count
                   ELSE LEAST(old.new_count + COALESCE((
                          SELECT sum(s.server_count) FROM bot_shard_counts s
                           WHERE s.bot_id = old.id AND s.shard_id <> old.shard_id
                             AND (old.shard_count IS NULL OR s.shard_id < old.shard_count)), 0),
                        max_total)::bigint
              END AS total
         FROM old
     )
     UPDATE bots b
        SET server_count = t.total, checked_in_at = t.now, updated_at = t.now
       FROM t
      WHERE b.id = t.id
     RETURNING t.i, b.id, t.old_count IS DISTINCT FROM t.total;
END;
$$;

ALTER TABLE "bots" DROP COLUMN "shard_counts";
