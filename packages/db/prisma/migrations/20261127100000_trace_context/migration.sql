-- Traces (docs/tracing.md): a delivery keeps the W3C context it was created under, so whatever
-- hands it to the queue later (the request path, the outbox relay after a Redis outage, a retry)
-- continues that trace, across processes and restarts; each attempt keeps the trace id it was made
-- under, which the owner's delivery log shows and the request carried as X-Webhook-Trace.

-- `00-<trace id>-<span id>-<flags>`: the span the delivery was created (or last redelivered) under.
-- Null for deliveries made before this migration, or by a process without tracing.
ALTER TABLE "webhook_deliveries" ADD COLUMN "traceparent" varchar(55);
-- The 32 hex characters of the delivery's trace when the attempt was made.
ALTER TABLE "webhook_attempts" ADD COLUMN "trace_id" char(32);
-- The same for a test event (webhook.test): the trace of the request that sent it.
ALTER TABLE "webhook_test_attempts" ADD COLUMN "trace_id" char(32);

-- The record statement writes each attempt's trace id from the delivery row it already holds
-- locked (nothing read beside it). Same parameters as before, so dispatchers of either version call
-- the same function during a rolling deploy.
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
             i.attempted_at, substr(u.traceparent, 4, 32)
        FROM i JOIN u ON u.id = i.id
    )
    SELECT l.id, u.id IS NOT NULL FROM l LEFT JOIN u ON u.id = l.id;
END;
$$;

-- A writer that leaves the series out (the claim's interrupted attempt) gets the trace id with it.
CREATE OR REPLACE FUNCTION "webhook_attempts_series"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT COALESCE(d.series, 0), substr(d.traceparent, 4, 32) INTO NEW.series, NEW.trace_id
      FROM webhook_deliveries d WHERE d.id = NEW.delivery_id;
    NEW.series := COALESCE(NEW.series, 0);
    RETURN NEW;
END;
$$;

-- A manual redelivery starts a new trace (linked to the delivery's previous one): the new series
-- stores its context, and the previous context is returned for the link. A new overload (the
-- three-parameter function stays for apps of the previous version during a rolling deploy).
CREATE FUNCTION "botdir_redeliver"(delivery_id uuid, bot_id varchar, now timestamptz, new_traceparent varchar)
RETURNS TABLE (state delivery_state, has_webhook boolean, series int, previous_traceparent varchar)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM 1 FROM webhook_deliveries k
      WHERE k.id = botdir_redeliver.delivery_id AND k.bot_id = botdir_redeliver.bot_id
        FOR NO KEY UPDATE;

    RETURN QUERY
    WITH d AS (
      SELECT r.id, r.state, r.traceparent,
             b.webhook_url IS NOT NULL AND b.webhook_secret_encrypted IS NOT NULL
               AND b.webhook_disabled_at IS NULL AS has_webhook
        FROM webhook_deliveries r
        JOIN bots b ON b.id = r.bot_id
       WHERE r.id = botdir_redeliver.delivery_id AND r.bot_id = botdir_redeliver.bot_id
    ), u AS (
      UPDATE webhook_deliveries w
         SET state = 'pending', series = w.series + 1, attempts_made = 0,
             next_attempt_at = botdir_redeliver.now, handed_off_at = NULL, completed_at = NULL,
             lease_until = NULL, attempt_started_at = NULL, updated_at = botdir_redeliver.now,
             traceparent = botdir_redeliver.new_traceparent
        FROM d
       WHERE w.id = d.id AND d.state <> 'pending' AND d.has_webhook
      RETURNING w.series
    )
    SELECT d.state, d.has_webhook, u.series, d.traceparent FROM d LEFT JOIN u ON true;
END;
$$;
