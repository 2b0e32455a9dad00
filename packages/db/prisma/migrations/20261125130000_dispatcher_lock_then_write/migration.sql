-- The dispatcher's claim, record and redeliver statements read the delivery rows they update under
-- a row lock (to decide whether the claim holds). They did it in one statement,
-- `WITH d AS (SELECT … FOR UPDATE) UPDATE webhook_deliveries … FROM d`, which deadlocks for the
-- reason migration 20261123150000_bot_writes_lock_then_update gives for bots: the lock follows the
-- row to its newest version, the UPDATE's own scan uses the statement's snapshot and can reach the
-- version before it, whose tuple lock a queued writer holds while it waits for us. Claims of one
-- delivery while other writers rewrite its row and attempts key-share lock it hit it
-- (apps/webhook-dispatcher/test/claim-concurrency.test.ts).
--
-- These functions take the locks in one statement and read and write in the next: in READ
-- COMMITTED each statement of a VOLATILE function takes a new snapshot, so the write sees exactly
-- the versions it holds locked and never waits. One round trip, as before. `wait` chooses between
-- waiting for each row's lock (one delivery, or rows in id order) and skipping rows locked
-- elsewhere (the batches: they never wait, so they never take part in a deadlock; a skipped row is
-- retried on its own with `wait`).
--
-- The locks are FOR NO KEY UPDATE, the strength the UPDATE takes anyway (no key column changes).
-- The claim and record statements took FOR UPDATE, which also conflicts with FOR KEY SHARE: claims
-- and attempts' foreign-key checks then waited for each other, and a FOR UPDATE and a FOR KEY
-- SHARE locker following the row's chain of versions deadlocked between themselves (seen in the
-- same test, a few per 1,800 claims, whatever the statement's shape).
--
-- The conditions of a claim or a record are read from the locked rows (`d`, `l`) and the target is
-- joined by id only, so the planner reaches it through the primary key whatever the statistics say
-- (apps/webhook-dispatcher/test/plans.test.ts).

-- Claims the deliveries `ids` whose claim holds (pending, no lease, fewer than `max_attempts`
-- attempts, due by `due_by`, a working webhook): attempts_made + 1, lease until `lease_end`.
-- Returns one row per locked delivery: its row as locked, its vote, and for a claimed one the
-- attempt number and the bot's webhook (the previous secret only while its overlap runs).
CREATE FUNCTION "botdir_claim_deliveries"(
    ids uuid[], wait boolean, lease_end timestamptz, now timestamptz, due_by timestamptz,
    max_attempts int)
RETURNS TABLE (
    id uuid, state delivery_state, attempts_made int, next_attempt_at timestamptz,
    lease_until timestamptz, bot_id varchar, user_id varchar, voted_at timestamptz,
    claimed_attempt int, webhook_url text, webhook_secret_encrypted text,
    webhook_previous_secret_encrypted text)
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
    WITH d AS (
      SELECT r.id, r.state, r.attempts_made, r.next_attempt_at, r.lease_until, r.bot_id, r.vote_id
        FROM webhook_deliveries r
       WHERE r.id = ANY(locked)
    ), c AS (
      UPDATE webhook_deliveries w
         SET attempts_made = d.attempts_made + 1, lease_until = lease_end,
             attempt_started_at = botdir_claim_deliveries.now, updated_at = botdir_claim_deliveries.now
        FROM d, bots b
       WHERE w.id = d.id
         AND b.id = d.bot_id
         AND d.state = 'pending'
         AND d.lease_until IS NULL
         AND d.attempts_made < max_attempts
         AND d.next_attempt_at <= due_by
         AND b.webhook_url IS NOT NULL
         AND b.webhook_secret_encrypted IS NOT NULL
         AND b.webhook_disabled_at IS NULL
      RETURNING w.id, w.attempts_made, b.webhook_url, b.webhook_secret_encrypted,
                CASE WHEN b.webhook_previous_secret_until > botdir_claim_deliveries.now
                     THEN b.webhook_previous_secret_encrypted END AS webhook_previous_secret_encrypted
    )
    SELECT d.id, d.state, d.attempts_made, d.next_attempt_at, d.lease_until, d.bot_id, v.user_id,
           v.voted_at, c.attempts_made, c.webhook_url, c.webhook_secret_encrypted,
           c.webhook_previous_secret_encrypted
      FROM d
      JOIN vote_log v ON v.id = d.vote_id
      LEFT JOIN c ON c.id = d.id;
END;
$$;

-- Records attempts (element k of each array is attempt k, one per delivery): the delivery's new
-- state only while the claim is still ours (same attempt number and lease), and the attempt row
-- only if that update happened. Returns one row per locked delivery: whether it was recorded
-- (false: the claim was taken over).
CREATE FUNCTION "botdir_record_attempts"(
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
      RETURNING d.id, d.series
    ), a AS (
      INSERT INTO webhook_attempts
             (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms,
              attempted_at)
      SELECT i.id, u.series, i.bot_id, i.attempt_number, i.status_code, i.error_kind, i.duration_ms,
             i.attempted_at
        FROM i JOIN u ON u.id = i.id
    )
    SELECT l.id, u.id IS NOT NULL FROM l LEFT JOIN u ON u.id = l.id;
END;
$$;

-- Starts a fresh series of five attempts of a delivered or failed delivery of `bot_id` (see
-- redeliver in packages/db/src/deliveries.ts). Returns no row when the bot has no such delivery;
-- otherwise its state as locked, whether the bot has a working webhook, and the new series number
-- (null when none started).
CREATE FUNCTION "botdir_redeliver"(delivery_id uuid, bot_id varchar, now timestamptz)
RETURNS TABLE (state delivery_state, has_webhook boolean, series int)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM 1 FROM webhook_deliveries k
      WHERE k.id = botdir_redeliver.delivery_id AND k.bot_id = botdir_redeliver.bot_id
        FOR NO KEY UPDATE;

    RETURN QUERY
    WITH d AS (
      SELECT r.id, r.state,
             b.webhook_url IS NOT NULL AND b.webhook_secret_encrypted IS NOT NULL
               AND b.webhook_disabled_at IS NULL AS has_webhook
        FROM webhook_deliveries r
        JOIN bots b ON b.id = r.bot_id
       WHERE r.id = botdir_redeliver.delivery_id AND r.bot_id = botdir_redeliver.bot_id
    ), u AS (
      UPDATE webhook_deliveries w
         SET state = 'pending', series = w.series + 1, attempts_made = 0,
             next_attempt_at = botdir_redeliver.now, handed_off_at = NULL, completed_at = NULL,
             lease_until = NULL, attempt_started_at = NULL, updated_at = botdir_redeliver.now
        FROM d
       WHERE w.id = d.id AND d.state <> 'pending' AND d.has_webhook
      RETURNING w.series
    )
    SELECT d.state, d.has_webhook, u.series FROM d LEFT JOIN u ON true;
END;
$$;
