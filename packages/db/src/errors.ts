/**
 * PostgreSQL errors that say nothing about the statement's input: the transaction lost a race and
 * was rolled back whole, and PostgreSQL's documentation says to retry it (deadlock_detected 40P01,
 * serialization_failure 40001). Used as `retryAlone` of the statement batches (@botdir/batcher).
 */
const RETRYABLE_CONFLICTS = new Set(["40P01", "40001"]);

export function isRetryableConflict(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && RETRYABLE_CONFLICTS.has(code);
}
