-- Per-shard stats (apps/api POST /stats) and manual redelivery (issue 14).

-- The latest count of each shard of a bot, element shard_id + 1 (NULL: that shard has not posted).
-- It lives in the bots row so that the one batched /stats statement reads it under the row lock
-- it already takes: concurrent posts of two shards see each other's counts (a separate table would
-- be read from the statement's snapshot and could lose a concurrent shard's count). server_count is
-- the sum of the non-null elements; a post without shard fields sets the total and empties this.
ALTER TABLE "bots" ADD COLUMN "shard_counts" BIGINT[] NOT NULL DEFAULT '{}';

-- Manual redelivery: a `delivered` or `failed` delivery gets a fresh series of five attempts under
-- the same id. `series` counts the series (0 = the original one); each attempt records the series it
-- belongs to, so attempt numbers stay 1..5 per series and the log keeps every earlier attempt.
ALTER TABLE "webhook_deliveries" ADD COLUMN "series" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "webhook_attempts" ADD COLUMN "series" INTEGER NOT NULL DEFAULT 0;
DROP INDEX "webhook_attempts_delivery_id_attempt_number_key";
CREATE UNIQUE INDEX "webhook_attempts_delivery_id_series_attempt_number_key"
    ON "webhook_attempts"("delivery_id", "series", "attempt_number");

-- An attempt belongs to the series its delivery is in when it is recorded. Set here, not by each
-- INSERT, so that every writer of attempts (the dispatcher's claim and record statements) stays
-- unchanged and cannot get it wrong. A row without a delivery keeps the value it was given.
CREATE FUNCTION "webhook_attempts_series"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.series := COALESCE((SELECT d.series FROM webhook_deliveries d WHERE d.id = NEW.delivery_id), NEW.series);
    RETURN NEW;
END;
$$;

CREATE TRIGGER "webhook_attempts_set_series"
    BEFORE INSERT ON "webhook_attempts"
    FOR EACH ROW EXECUTE FUNCTION "webhook_attempts_series"();
