-- Webhook features for bot owners (issue 14a): secret rotation with overlap, dead-endpoint
-- disabling, and the test event's attempt log.

-- Rotation: the previous secret (encrypted like the current one) keeps signing beside the new one
-- in webhook-signature until webhook_previous_secret_until. Setting a URL clears both.
ALTER TABLE "bots" ADD COLUMN "webhook_previous_secret_encrypted" TEXT;
ALTER TABLE "bots" ADD COLUMN "webhook_previous_secret_until" TIMESTAMPTZ(3);

-- Dead endpoints: a disabled webhook gets no attempts. webhook_enabled_at (set when a URL is set or
-- the webhook is re-enabled) starts the window in which failures are counted.
ALTER TABLE "bots" ADD COLUMN "webhook_enabled_at" TIMESTAMPTZ(3);
ALTER TABLE "bots" ADD COLUMN "webhook_disabled_at" TIMESTAMPTZ(3);
ALTER TABLE "bots" ADD COLUMN "webhook_disabled_reason" TEXT;

-- Why a delivery ended failed without using its attempts (e.g. endpoint_disabled); null otherwise.
ALTER TABLE "webhook_deliveries" ADD COLUMN "failure_reason" TEXT;

-- Test events (POST /internal/v1/bots/{id}/webhook/test): one attempt each, no vote, no delivery.
-- Listed in the attempt log marked as tests; also the per-bot rate limit's counter.
CREATE TABLE "webhook_test_attempts" (
    "id" UUID NOT NULL,
    "bot_id" VARCHAR(19) NOT NULL,
    "status_code" INTEGER,
    "error_kind" TEXT,
    "duration_ms" INTEGER NOT NULL DEFAULT 0,
    "delivered" BOOLEAN NOT NULL DEFAULT false,
    "attempted_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "webhook_test_attempts_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "webhook_test_attempts_bot_id_fkey" FOREIGN KEY ("bot_id") REFERENCES "bots"("id")
        ON DELETE RESTRICT ON UPDATE CASCADE
);
CREATE INDEX "webhook_test_attempts_bot_newest_idx" ON "webhook_test_attempts" ("bot_id", "attempted_at" DESC);
