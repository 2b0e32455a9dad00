-- What writing a delivery and its attempts costs PostgreSQL (docs/performance.md, "PostgreSQL").

-- The pending index held every delivery ever made, (state, next_attempt_at), and each recorded
-- outcome added an entry for the row's new version. The outbox relay, its backlog gauge and the
-- dead-endpoint rule only ever look for pending rows: the index now holds those alone, so it stays
-- as small as the backlog and a delivery leaves it when its attempts end. On a large existing
-- table, build it first without blocking writes (`CREATE INDEX CONCURRENTLY
-- webhook_deliveries_pending_idx ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';`):
-- this migration then skips the build.
CREATE INDEX IF NOT EXISTS "webhook_deliveries_pending_idx" ON "webhook_deliveries" ("next_attempt_at")
    WHERE "state" = 'pending';
DROP INDEX IF EXISTS "deliveries_pending_idx";

-- An attempt's bot is its delivery's bot. The record statement now writes the bot id of the
-- delivery row it holds locked (the caller's `bot_ids` are no longer read; the parameter stays so
-- that dispatchers of either version call the same function during a rolling deploy), and the
-- interrupted-attempt insert copies it from the same row, so the column cannot disagree with the
-- delivery, whose own foreign key keeps the bot. The attempts' second foreign key to bots made
-- every recorded attempt key-share lock its bot's row (a write to that row, shared with every
-- vote of the bot being recorded): it goes.
CREATE OR REPLACE FUNCTION "botdir_record_attempts"(
    wait boolean, ids uuid[], attempt_numbers int[], lease_untils timestamptz[], states text[],
    next_attempt_ats timestamptz[], completed_ats timestamptz[], updated_ats timestamptz[],
    bot_ids varchar[], status_codes int[], error_kinds text[], durations int[],
    attempted_ats timestamptz[])
RETURNS TABLE (id uuid, recorded boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    locked uuid[];
BEGIN
    IF wait THEN
        SELECT array_agg(x.id) INTO locked FROM (
          SELECT k.id FROM webhook_deliveries k WHERE k.id = ANY(ids) ORDER BY k.id FOR NO KEY UPDATE) x;
    ELSE
        SELECT array_agg(x.id) INTO locked FROM (
          SELECT k.id FROM webhook_deliveries k WHERE k.id = ANY(ids) FOR NO KEY UPDATE SKIP LOCKED) x;
    END IF;

    RETURN QUERY
    WITH i AS (
      SELECT * FROM unnest(ids, attempt_numbers, lease_untils, states, next_attempt_ats,
                           completed_ats, updated_ats, bot_ids, status_codes, error_kinds, durations,
                           attempted_ats)
             AS i(id, attempt_number, lease_until, state, next_attempt_at, completed_at, updated_at,
                  bot_id, status_code, error_kind, duration_ms, attempted_at)
    ), l AS (
      SELECT r.id, r.state, r.attempts_made, r.lease_until
        FROM webhook_deliveries r WHERE r.id = ANY(locked)
    ), u AS (
      UPDATE webhook_deliveries d
         SET state = i.state::delivery_state,
             next_attempt_at = COALESCE(i.next_attempt_at, d.next_attempt_at),
             completed_at = i.completed_at,
             lease_until = NULL,
             attempt_started_at = NULL,
             updated_at = i.updated_at
        FROM i, l
       WHERE d.id = l.id AND l.id = i.id
         AND l.state = 'pending' AND l.attempts_made = i.attempt_number
         AND l.lease_until = i.lease_until
      RETURNING d.id, d.series, d.bot_id
    ), a AS (
      INSERT INTO webhook_attempts
             (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms,
              attempted_at)
      SELECT i.id, u.series, u.bot_id, i.attempt_number, i.status_code, i.error_kind, i.duration_ms,
             i.attempted_at
        FROM i JOIN u ON u.id = i.id
    )
    SELECT l.id, u.id IS NOT NULL FROM l LEFT JOIN u ON u.id = l.id;
END;
$$;

ALTER TABLE "webhook_attempts" DROP CONSTRAINT "webhook_attempts_bot_id_fkey";
