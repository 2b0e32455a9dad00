-- The functions that reach deliveries by an array of ids (the dispatcher's claim and record, and
-- manual redelivery) plan their statements with the values of each call.
--
-- A PL/pgSQL function caches the plans of its statements in each database session. After five
-- calls PostgreSQL may keep one generic plan, made without the ids and with the statistics of that
-- moment, for the rest of the session (behind a transaction-pooling PgBouncer too: its server
-- connections live long). A fresh install starts with an empty `webhook_deliveries` that nothing
-- has analysed (no autovacuum, or not yet): its generic plans for `id = ANY(ids)` are sequential
-- scans, and each call then reads the whole table, a table that grows by every vote (60 s at 400
-- votes/s read ≈ 100 M rows, docs/performance.md `soak`). A plan made with the call's ids and the
-- table's current size reaches them through the primary key whatever the statistics say
-- (packages/db/test/by-id-plans.test.ts). Planning each call costs PostgreSQL some CPU where a
-- generic plan would have been good (an analysed table); docs/performance.md gives the figures.
ALTER FUNCTION "botdir_claim_deliveries"(uuid[], boolean, timestamptz, timestamptz, timestamptz, int)
    SET plan_cache_mode = force_custom_plan;

ALTER FUNCTION "botdir_record_attempts"(
    boolean, uuid[], int[], timestamptz[], text[], timestamptz[], timestamptz[], timestamptz[],
    varchar[], int[], text[], int[], timestamptz[])
    SET plan_cache_mode = force_custom_plan;

ALTER FUNCTION "botdir_redeliver"(uuid, varchar, timestamptz) SET plan_cache_mode = force_custom_plan;

ALTER FUNCTION "botdir_redeliver"(uuid, varchar, timestamptz, varchar) SET plan_cache_mode = force_custom_plan;
