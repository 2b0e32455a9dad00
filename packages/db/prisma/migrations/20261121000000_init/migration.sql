-- CreateEnum
CREATE TYPE "bot_status" AS ENUM ('pending', 'approved');

-- CreateEnum
CREATE TYPE "delivery_state" AS ENUM ('pending', 'delivered', 'failed');

-- CreateTable
CREATE TABLE "bots" (
    "id" VARCHAR(19) NOT NULL,
    "status" "bot_status" NOT NULL DEFAULT 'pending',
    "commands" JSONB NOT NULL DEFAULT '[]',
    "server_count" BIGINT,
    "checked_in_at" TIMESTAMPTZ(3),
    "token_hash" CHAR(64),
    "token_created_at" TIMESTAMPTZ(3),
    "webhook_url" TEXT,
    "webhook_secret_encrypted" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "approved_at" TIMESTAMPTZ(3),

    CONSTRAINT "bots_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "vote_windows" (
    "bot_id" VARCHAR(19) NOT NULL,
    "user_id" VARCHAR(20) NOT NULL,
    "voted_at" TIMESTAMPTZ(3) NOT NULL,
    "vote_id" BIGINT NOT NULL,

    CONSTRAINT "vote_windows_pkey" PRIMARY KEY ("bot_id","user_id")
);

-- CreateTable
CREATE TABLE "vote_log" (
    "id" BIGSERIAL NOT NULL,
    "bot_id" VARCHAR(19) NOT NULL,
    "user_id" VARCHAR(20) NOT NULL,
    "voted_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "vote_log_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "webhook_deliveries" (
    "id" UUID NOT NULL,
    "bot_id" VARCHAR(19) NOT NULL,
    "vote_id" BIGINT NOT NULL,
    "state" "delivery_state" NOT NULL DEFAULT 'pending',
    "attempts_made" INTEGER NOT NULL DEFAULT 0,
    "next_attempt_at" TIMESTAMPTZ(3) NOT NULL,
    "handed_off_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "completed_at" TIMESTAMPTZ(3),

    CONSTRAINT "webhook_deliveries_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "webhook_attempts" (
    "id" BIGSERIAL NOT NULL,
    "delivery_id" UUID NOT NULL,
    "bot_id" VARCHAR(19) NOT NULL,
    "attempt_number" INTEGER NOT NULL,
    "status_code" INTEGER,
    "error_kind" TEXT,
    "duration_ms" INTEGER NOT NULL,
    "attempted_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "webhook_attempts_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "bots_token_hash_key" ON "bots"("token_hash");

-- CreateIndex
CREATE INDEX "vote_log_bot_newest_idx" ON "vote_log"("bot_id", "voted_at" DESC, "id" DESC);

-- CreateIndex
CREATE UNIQUE INDEX "webhook_deliveries_vote_id_key" ON "webhook_deliveries"("vote_id");

-- CreateIndex
CREATE INDEX "deliveries_pending_idx" ON "webhook_deliveries"("state", "next_attempt_at");

-- CreateIndex
CREATE INDEX "webhook_attempts_bot_newest_idx" ON "webhook_attempts"("bot_id", "attempted_at" DESC, "id" DESC);

-- CreateIndex
CREATE UNIQUE INDEX "webhook_attempts_delivery_id_attempt_number_key" ON "webhook_attempts"("delivery_id", "attempt_number");

-- AddForeignKey
ALTER TABLE "vote_windows" ADD CONSTRAINT "vote_windows_bot_id_fkey" FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "vote_log" ADD CONSTRAINT "vote_log_bot_id_fkey" FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_bot_id_fkey" FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_vote_id_fkey" FOREIGN KEY ("vote_id") REFERENCES "vote_log"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_delivery_id_fkey" FOREIGN KEY ("delivery_id") REFERENCES "webhook_deliveries"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_bot_id_fkey" FOREIGN KEY ("bot_id") REFERENCES "bots"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- The vote log is append-only: the database itself refuses UPDATE, DELETE and TRUNCATE.
CREATE FUNCTION "vote_log_append_only"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'vote_log is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER "vote_log_no_update_delete"
    BEFORE UPDATE OR DELETE ON "vote_log"
    FOR EACH ROW EXECUTE FUNCTION "vote_log_append_only"();

CREATE TRIGGER "vote_log_no_truncate"
    BEFORE TRUNCATE ON "vote_log"
    FOR EACH STATEMENT EXECUTE FUNCTION "vote_log_append_only"();

-- Bot ids and user ids are digits only; the database keeps that true whatever writes them.
ALTER TABLE "bots" ADD CONSTRAINT "bots_id_format" CHECK ("id" ~ '^[0-9]{17,19}$');
ALTER TABLE "bots" ADD CONSTRAINT "bots_server_count_nonnegative" CHECK ("server_count" IS NULL OR "server_count" >= 0);
ALTER TABLE "vote_log" ADD CONSTRAINT "vote_log_user_id_format" CHECK ("user_id" ~ '^[0-9]{17,20}$');
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_number_range" CHECK ("attempt_number" BETWEEN 1 AND 5);
