-- Vote counters per bot and UTC hour, so the widget's "votes in the last 30 days" costs the same
-- for a bot with five million votes as for one with five (apps/api/src/services/bots.ts):
--   count = votes of the partial first hour, read from the log (an index range scan of at most one
--           hour of the bot's votes) + the sum of the counters of the later hours.
--
-- The counters are written by a statement-level trigger on vote_log, inside the very statement
-- that appends the votes (for vote-ingest: the one batched cast-vote statement, one aggregated
-- upsert per batch). A trigger rather than another CTE of that statement so that every writer of
-- the log counts: older replicas still running during a rolling deploy, fixtures, imports. The log
-- itself is never modified (it stays append-only, enforced by vote_log_append_only).
--
-- `shard` spreads one bot-hour over a few rows (by backend pid), so concurrent batches of a very
-- popular bot, each on its own connection, do not queue on one row lock until their commits.
CREATE TABLE "vote_counts" (
    "bot_id" VARCHAR(19) NOT NULL,
    "hour" TIMESTAMPTZ(0) NOT NULL,
    "shard" SMALLINT NOT NULL,
    "votes" BIGINT NOT NULL,

    CONSTRAINT "vote_counts_pkey" PRIMARY KEY ("bot_id", "hour", "shard"),
    CONSTRAINT "vote_counts_hour_aligned" CHECK ("hour" = date_trunc('hour', "hour", 'UTC'))
);

-- Counters older than the widget's window are never read; retention deletes them by hour. The
-- trigger inserts rows in hour order, so a BRIN index finds old hours at almost no write cost.
CREATE INDEX "vote_counts_hour_brin" ON "vote_counts" USING brin ("hour");

ALTER TABLE "vote_counts" ADD CONSTRAINT "vote_counts_bot_id_fkey"
    FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

CREATE FUNCTION "vote_counts_add"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Rows in (bot, hour) order: two statements in flight never deadlock on the counters.
    INSERT INTO "vote_counts" AS c ("bot_id", "hour", "shard", "votes")
    SELECT n."bot_id", date_trunc('hour', n."voted_at", 'UTC'), (pg_backend_pid() % 4)::smallint, count(*)
      FROM "new_votes" n
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT ("bot_id", "hour", "shard") DO UPDATE SET "votes" = c."votes" + EXCLUDED."votes";
    RETURN NULL;
END;
$$;

-- Created before the backfill: CREATE TRIGGER takes a SHARE ROW EXCLUSIVE lock on vote_log that
-- this migration's transaction holds until it commits, so no vote is appended between the backfill
-- (which reads every committed vote) and the moment the trigger counts new ones.
CREATE TRIGGER "vote_log_count"
    AFTER INSERT ON "vote_log"
    REFERENCING NEW TABLE AS "new_votes"
    FOR EACH STATEMENT EXECUTE FUNCTION "vote_counts_add"();

-- Backfill from the log in batches of `botdir.backfill_batch` ids (default 1,000,000): each batch
-- is one index range scan of the primary key and one aggregated upsert, so memory stays bounded
-- whatever the log's size. Backfilled rows use shard 0.
DO $$
DECLARE
    batch bigint := coalesce(nullif(current_setting('botdir.backfill_batch', true), ''), '1000000')::bigint;
    lo bigint;
    hi bigint;
BEGIN
    SELECT min(id), max(id) INTO lo, hi FROM "vote_log";
    WHILE lo IS NOT NULL AND lo <= hi LOOP
        INSERT INTO "vote_counts" AS c ("bot_id", "hour", "shard", "votes")
        SELECT l."bot_id", date_trunc('hour', l."voted_at", 'UTC'), 0, count(*)
          FROM "vote_log" l
         WHERE l."id" >= lo AND l."id" < lo + batch
         GROUP BY 1, 2
        ON CONFLICT ("bot_id", "hour", "shard") DO UPDATE SET "votes" = c."votes" + EXCLUDED."votes";
        lo := lo + batch;
    END LOOP;
END;
$$;

-- GET /votes at scale: the newest `limit` votes of a bot are scattered over the log's heap (its
-- votes are interleaved with every other bot's), so with user_id outside the index each listed vote
-- cost a random heap page read, which at 10 M votes no longer come from shared buffers (the scale
-- benchmark, docs/performance.md). Carrying user_id in the index makes /votes an index-only scan
-- (no heap page for rows on all-visible pages). On a large existing database, build it first without blocking writes
-- (`CREATE INDEX CONCURRENTLY vote_log_bot_newest_cover_idx ON vote_log (bot_id, voted_at DESC,
-- id DESC) INCLUDE (user_id);`): this migration then skips the build.
CREATE INDEX IF NOT EXISTS "vote_log_bot_newest_cover_idx" ON "vote_log" ("bot_id", "voted_at" DESC, "id" DESC)
    INCLUDE ("user_id");
DROP INDEX IF EXISTS "vote_log_bot_newest_idx";

-- Retention (apps/webhook-dispatcher/src/retention.ts) finds deliveries in a final state by their
-- completion time without reading the pending ones.
CREATE INDEX "webhook_deliveries_completed_idx" ON "webhook_deliveries" ("completed_at", "id")
    WHERE "state" <> 'pending';
