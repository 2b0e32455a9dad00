/**
 * One delivery-retention run, then exit: `node --import tsx apps/webhook-dispatcher/src/retention-cli.ts`
 * (same environment as the dispatcher). For operators who want to prune now, and for the scale
 * benchmark; the dispatcher replicas run the same job on their timer (src/retention.ts). Takes the
 * same advisory lock, so it never runs alongside a replica's run.
 */
import { createDb } from "@botdir/db";
import { databaseOf, describeError, loggerOptions, systemClock } from "@botdir/service-kit";
import { pino } from "pino";
import { loadEnv } from "./env.js";
import { runRetention } from "./retention.js";

const env = loadEnv();
const logger = pino(loggerOptions("webhook-dispatcher", env.LOG_LEVEL));
const db = createDb({ ...databaseOf(env), poolMax: 2 });
let code = 0;
try {
  const result = await runRetention(
    { db, clock: systemClock },
    { retentionDays: env.WEBHOOK_RETENTION_DAYS, batchSize: env.WEBHOOK_RETENTION_BATCH, pauseMs: 20 },
  );
  logger.info(
    { event: result.ran ? "retention_run" : "retention_skipped", ...result },
    "delivery retention run",
  );
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (error) {
  logger.error({ event: "retention_failed", err: describeError(error) }, "delivery retention");
  code = 1;
} finally {
  await db.close();
}
process.exit(code);
