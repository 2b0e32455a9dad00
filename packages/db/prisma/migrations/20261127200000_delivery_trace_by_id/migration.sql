-- A delivery whose row keeps no W3C context (a vote cast where nothing is exported and the caller
-- sent no traceparent: vote-ingest makes no ids for it; or a delivery made before traces were kept)
-- belongs to the trace whose id is the delivery id's 32 hex digits (@botdir/db deliveryTraceparent,
-- docs/tracing.md): each attempt keeps that trace id, as its request carried it in X-Webhook-Trace.
-- Same functions and parameters as before, only the trace id's fallback is new.

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
      RETURNING d.id, d.series, d.bot_id, d.traceparent
    ), a AS (
      INSERT INTO webhook_attempts
             (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms,
              attempted_at, trace_id)
      SELECT i.id, u.series, u.bot_id, i.attempt_number, i.status_code, i.error_kind, i.duration_ms,
             i.attempted_at, COALESCE(substr(u.traceparent, 4, 32), replace(u.id::text, '-', ''))
        FROM i JOIN u ON u.id = i.id
    )
    SELECT l.id, u.id IS NOT NULL FROM l LEFT JOIN u ON u.id = l.id;
END;
$$;

-- A writer that leaves the series out (the claim's interrupted attempt) gets the trace id with it.
CREATE OR REPLACE FUNCTION "webhook_attempts_series"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT COALESCE(d.series, 0), COALESCE(substr(d.traceparent, 4, 32), replace(d.id::text, '-', ''))
      INTO NEW.series, NEW.trace_id
      FROM webhook_deliveries d WHERE d.id = NEW.delivery_id;
    NEW.series := COALESCE(NEW.series, 0);
    RETURN NEW;
END;
$$;
