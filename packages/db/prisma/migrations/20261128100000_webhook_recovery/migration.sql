-- Recovery (docs/webhooks.md "Recovering undelivered votes"): one call queues vote.create again for
-- every vote of a window whose delivery did not succeed (failed, or never made because the webhook
-- was disabled). The request only writes the recovery row; vote-ingest's recovery driver then
-- queues its votes in keyset batches, a few hundred in flight at a time, so the dispatcher's
-- per-webhook fairness keeps other bots' latency.

CREATE TABLE "webhook_recoveries" (
    "id" UUID NOT NULL,
    "bot_id" VARCHAR(19) NOT NULL,
    -- The window [since, until) of voted_at.
    "since" TIMESTAMPTZ(3) NOT NULL,
    "until" TIMESTAMPTZ(3) NOT NULL,
    -- running: votes left to queue or deliveries pending; done; stopped: the webhook was disabled
    -- or removed while it ran (the votes it had not queued were not sent).
    "state" VARCHAR(16) NOT NULL DEFAULT 'running',
    -- Votes the recovery sends: counted when it started, set to what was queued when it ends.
    "total" INTEGER NOT NULL,
    -- Votes queued so far.
    "queued" INTEGER NOT NULL DEFAULT 0,
    -- Keyset cursor over vote_log (voted_at, id): the last vote looked at; null before the first.
    "cursor_voted_at" TIMESTAMPTZ(3),
    "cursor_vote_id" BIGINT,
    -- Every vote of the window has been looked at: the recovery ends when none of its deliveries is pending.
    "scanned" BOOLEAN NOT NULL DEFAULT false,
    -- The request's trace: every recovered delivery's new trace links to it.
    "traceparent" VARCHAR(55),
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "webhook_recoveries_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "webhook_recoveries_state" CHECK ("state" IN ('running', 'done', 'stopped')),
    CONSTRAINT "webhook_recoveries_window" CHECK ("since" < "until")
);

ALTER TABLE "webhook_recoveries" ADD CONSTRAINT "webhook_recoveries_bot_id_fkey"
    FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- The driver's scan of running recoveries and the overlap check of a new one.
CREATE INDEX "webhook_recoveries_running_idx" ON "webhook_recoveries" ("bot_id", "since")
    WHERE "state" = 'running';

-- The recovery a delivery was last recovered by, and the series it started: the attempts of that
-- series are marked recovered in the delivery log, and the recovery's counts read these rows.
ALTER TABLE "webhook_deliveries" ADD COLUMN "recovery_id" UUID;
ALTER TABLE "webhook_deliveries" ADD COLUMN "recovery_series" INTEGER;

CREATE INDEX "webhook_deliveries_recovery_idx" ON "webhook_deliveries" ("recovery_id", "state")
    WHERE "recovery_id" IS NOT NULL;
