-- Crash-safe claiming of webhook delivery attempts (apps/webhook-dispatcher).
--
-- A dispatcher claims an attempt by raising attempts_made and setting lease_until (the attempt's
-- start plus the HTTP timeout plus a margin) in one UPDATE. While the lease runs, no other job or
-- replica may start an attempt of the same delivery. A lease that has expired while the delivery is
-- still pending means the process died mid-attempt: the next claimer records that attempt as
-- `interrupted` (attempted at attempt_started_at) before it goes on, so the attempt numbers stay
-- 1..5 without gaps and no more than five attempts are ever made or recorded.
ALTER TABLE "webhook_deliveries" ADD COLUMN "lease_until" TIMESTAMPTZ(3);
ALTER TABLE "webhook_deliveries" ADD COLUMN "attempt_started_at" TIMESTAMPTZ(3);
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_attempts_range"
    CHECK ("attempts_made" BETWEEN 0 AND 5);
