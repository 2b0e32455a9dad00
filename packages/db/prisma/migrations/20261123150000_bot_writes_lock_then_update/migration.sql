-- POST /stats and PUT /commands write a bot row and must know whether the value changed (the
-- page cache is invalidated only then), so they read the row they update under a row lock. They
-- did it in one statement, `WITH old AS (SELECT … FOR NO KEY UPDATE) UPDATE bots … FROM old`, and
-- that deadlocks: the lock follows the row to its newest version, but the UPDATE's own scan uses
-- the statement's snapshot and can still find the version before it. A second writer that queued
-- on that older version holds its tuple lock while waiting for us (to lock the newer versions
-- too), and our UPDATE then waits for that tuple lock. Concurrent posts for one bot while its
-- votes are written (their foreign keys key-share lock the row) hit it: 50–170 deadlocks per case
-- of 1,200–2,400 writes from 8 connections with 3 key-share lockers, none with these functions
-- (apps/api/test/bot-writes-concurrency.test.ts).
--
-- These functions take the locks in one statement (rows in id order) and write in the next: in
-- READ COMMITTED each statement of a VOLATILE function takes a new snapshot, so the write sees
-- exactly the versions it holds locked and never waits. One round trip, as before.

-- A batch of /stats posts: element k of each array is post k (one token at most once per batch).
-- Returns the posts whose token owns their bot (or names none): the post's index (1-based), the
-- bot, and whether its server count changed. Shards: see apps/api/src/services/bots.ts.
CREATE FUNCTION "botdir_write_stats"(
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

    RETURN QUERY
    WITH q AS (
       SELECT * FROM unnest(token_hashes, bot_ids, server_counts, nows, shard_ids, shard_totals)
         WITH ORDINALITY AS q(token_hash, bot_id, server_count, now, shard_id, shard_count, i)
     ), old AS (
       SELECT b.id, b.server_count AS old_count, b.shard_counts AS old_shards, q.server_count AS new_count,
              q.shard_id, q.shard_count, q.now, q.i
         FROM q
         JOIN bots b ON b.token_hash = q.token_hash AND b.status = 'approved'
                    AND (q.bot_id IS NULL OR b.id = q.bot_id)
     ), new AS (
       SELECT old.*,
              CASE WHEN old.shard_id IS NULL THEN '{}'::bigint[]
                   ELSE ARRAY(
                     SELECT CASE WHEN g = old.shard_id + 1 THEN old.new_count ELSE old.old_shards[g] END
                       FROM generate_series(1, GREATEST(cardinality(old.old_shards), old.shard_id + 1)) g
                      WHERE old.shard_count IS NULL OR g <= old.shard_count
                      ORDER BY g)
              END AS shards
         FROM old
     ), t AS (
       SELECT new.*,
              CASE WHEN new.shard_id IS NULL THEN new.new_count
                   ELSE (SELECT LEAST(sum(c), max_total)::bigint FROM unnest(new.shards) c)
              END AS total
         FROM new
     )
     UPDATE bots b
        SET server_count = t.total, shard_counts = t.shards, checked_in_at = t.now, updated_at = t.now
       FROM t
      WHERE b.id = t.id
     RETURNING t.i, b.id, t.old_count IS DISTINCT FROM t.total;
END;
$$;

-- One PUT /commands: returns the bot and whether its command list changed, or no row when the
-- token does not own an approved bot (or not the one named).
CREATE FUNCTION "botdir_write_commands"(
    token_hash char(64), bot_id varchar, commands jsonb, now timestamptz)
RETURNS TABLE (id varchar, changed boolean)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM bots b
      WHERE b.token_hash = botdir_write_commands.token_hash AND b.status = 'approved'
        AND (botdir_write_commands.bot_id IS NULL OR b.id = botdir_write_commands.bot_id)
        FOR NO KEY UPDATE;

    RETURN QUERY
    WITH old AS (
       SELECT b.id, b.commands FROM bots b
        WHERE b.token_hash = botdir_write_commands.token_hash AND b.status = 'approved'
          AND (botdir_write_commands.bot_id IS NULL OR b.id = botdir_write_commands.bot_id)
    )
    UPDATE bots b
       SET commands = botdir_write_commands.commands, updated_at = botdir_write_commands.now
      FROM old
     WHERE b.id = old.id
    RETURNING b.id, old.commands IS DISTINCT FROM botdir_write_commands.commands;
END;
$$;
