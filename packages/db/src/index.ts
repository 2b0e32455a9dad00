export type { Db, DbOptions, DedicatedConnection, PreparedStatements } from "./client.js";
export { createDb, inTransaction, isStatementNameError } from "./client.js";
export { DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL, MIGRATION_ENV, migrationUrl } from "./defaults.js";
export type { AttemptView, DeliveryStateName, RedeliverResult } from "./deliveries.js";
export {
  ATTEMPTS_SHOWN,
  deliveryTraceId,
  deliveryTraceparent,
  isDeliveryId,
  listRecentAttempts,
  newDeliveryId,
  redeliver,
} from "./deliveries.js";
export { isRetryableConflict } from "./errors.js";
export type { Attempt, Bot, Delivery, PrismaClient, Vote, VoteWindow } from "./generated/prisma/client.js";
export { BotStatus, DeliveryState, Prisma } from "./generated/prisma/client.js";
export type { MigrationResult } from "./migrate.js";
export { ensureDatabase, listMigrations, MIGRATIONS_DIR, migrate } from "./migrate.js";
export type {
  RecoveredDelivery,
  RecoveryStateName,
  RecoveryStep,
  RecoveryStepOptions,
  RecoveryView,
  StartRecoveryResult,
} from "./recoveries.js";
export {
  getRecovery,
  markHandedOff,
  RECOVERY_MAX_AGE_MS,
  runningRecoveries,
  startRecovery,
  stepRecovery,
} from "./recoveries.js";
export type { ScheduledReminders } from "./reminders.js";
export { scheduleReminders } from "./reminders.js";
export type { SecretBox } from "./secrets.js";
export {
  createSecretBox,
  keyIdOf,
  SecretUnreadable,
} from "./secrets.js";
export { toIso, toIsoOrNull } from "./time.js";
export { generateToken, generateWebhookSecret, hashToken } from "./tokens.js";
