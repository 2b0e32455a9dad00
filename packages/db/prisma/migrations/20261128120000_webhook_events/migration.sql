-- Webhook events (docs/webhooks.md "Events"): a delivery is one event of one vote, `vote.create`
-- when the vote is cast or `vote.available` when its 12-hour window ends, each with its own
-- delivery id; a bot's webhook subscribes to a set of events.

ALTER TABLE "webhook_deliveries" ADD COLUMN "event" TEXT NOT NULL DEFAULT 'vote.create';
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_event"
    CHECK ("event" IN ('vote.create', 'vote.available'));

-- One delivery per vote and event. The index leads with vote_id, so every lookup of a vote's
-- deliveries (recoveries' joins) still uses it.
CREATE UNIQUE INDEX "webhook_deliveries_vote_id_event_key" ON "webhook_deliveries" ("vote_id", "event");
DROP INDEX "webhook_deliveries_vote_id_key";

-- The events the bot's webhook receives; the default keeps every existing receiver as it was.
ALTER TABLE "bots" ADD COLUMN "webhook_events" TEXT[] NOT NULL DEFAULT '{vote.create}';
ALTER TABLE "bots" ADD CONSTRAINT "bots_webhook_events"
    CHECK (cardinality("webhook_events") > 0
           AND "webhook_events" <@ ARRAY['vote.create', 'vote.available']::text[]);

-- When the window's vote.available is due (its voted_at + 12 h), set by the cast when the bot's
-- webhook subscribes to vote.available, cleared by the scheduler when it creates the delivery.
-- Only pending reminders are in the index, so the scheduler's scan costs the same at any count.
ALTER TABLE "vote_windows" ADD COLUMN "remind_at" TIMESTAMPTZ(3);
CREATE INDEX "vote_windows_remind_at_idx" ON "vote_windows" ("remind_at") WHERE "remind_at" IS NOT NULL;

-- Creates the vote.available deliveries of up to `batch` due reminders (remind_at <= now), oldest
-- first, in one statement: the window rows are claimed FOR UPDATE SKIP LOCKED (two schedulers never
-- take the same row and never wait for each other), their remind_at cleared, and a delivery inserted
-- for each whose bot still has a usable webhook subscribed to vote.available (none otherwise); the
-- unique (vote_id, event) makes a second insert for a vote a no-op. `ids` are the delivery ids to
-- use (version 7 UUIDs made by the caller), at least `batch` of them. Returns the deliveries made
-- and, as `claimed`, how many reminders were taken. Planned with the call's values
-- (force_custom_plan): a plan for an unknown LIMIT expects a third of the table and updates the
-- claimed rows through a scan of all of vote_windows, a cost that grows with pending reminders.
CREATE FUNCTION "botdir_schedule_reminders"(ids uuid[], batch int, now timestamptz)
RETURNS TABLE (id uuid, bot_id varchar, claimed int)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH due AS (
      SELECT w.bot_id, w.user_id, w.vote_id, row_number() OVER (ORDER BY w.remind_at) AS n
        FROM (SELECT v.bot_id, v.user_id, v.vote_id, v.remind_at
                FROM vote_windows v
               WHERE v.remind_at IS NOT NULL AND v.remind_at <= botdir_schedule_reminders.now
               ORDER BY v.remind_at
               LIMIT batch
                 FOR NO KEY UPDATE SKIP LOCKED) w
    ), cleared AS (
      UPDATE vote_windows v SET remind_at = NULL
        FROM due
       WHERE v.bot_id = due.bot_id AND v.user_id = due.user_id
      RETURNING due.bot_id, due.vote_id, due.n
    ), made AS (
      INSERT INTO webhook_deliveries
             (id, bot_id, vote_id, event, state, attempts_made, next_attempt_at, created_at, updated_at)
      SELECT ids[c.n], c.bot_id, c.vote_id, 'vote.available', 'pending', 0,
             botdir_schedule_reminders.now, botdir_schedule_reminders.now, botdir_schedule_reminders.now
        FROM cleared c
        JOIN bots b ON b.id = c.bot_id
       WHERE b.webhook_url IS NOT NULL
         AND b.webhook_secret_encrypted IS NOT NULL
         AND b.webhook_disabled_at IS NULL
         AND 'vote.available' = ANY(b.webhook_events)
       ORDER BY c.vote_id
      ON CONFLICT (vote_id, event) DO NOTHING
      RETURNING webhook_deliveries.id, webhook_deliveries.bot_id
    )
    SELECT made.id, made.bot_id, (SELECT count(*)::int FROM cleared) FROM made
    UNION ALL
    -- One row carrying the count when no delivery was made.
    SELECT NULL::uuid, NULL::varchar, (SELECT count(*)::int FROM cleared) WHERE NOT EXISTS (SELECT 1 FROM made);
END;
$$;

-- The claim also returns the delivery's event (the dispatcher builds the body from it). Dropped and
-- created again because its result gains a column; a dispatcher of the previous version names its
-- columns and keeps working.
DROP FUNCTION "botdir_claim_deliveries"(uuid[], boolean, timestamptz, timestamptz, timestamptz, int);
CREATE FUNCTION "botdir_claim_deliveries"(
    ids uuid[], wait boolean, lease_end timestamptz, now timestamptz, due_by timestamptz,
    max_attempts int)
RETURNS TABLE (
    id uuid, state delivery_state, attempts_made int, next_attempt_at timestamptz,
    lease_until timestamptz, bot_id varchar, user_id varchar, voted_at timestamptz,
    claimed_attempt int, webhook_url text, webhook_secret_encrypted text,
    webhook_previous_secret_encrypted text, event text)
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
      SELECT r.id, r.state, r.attempts_made, r.next_attempt_at, r.lease_until, r.bot_id, r.vote_id, r.event
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
           c.webhook_previous_secret_encrypted, d.event
      FROM d
      JOIN vote_log v ON v.id = d.vote_id
      LEFT JOIN c ON c.id = d.id;
END;
$$;
