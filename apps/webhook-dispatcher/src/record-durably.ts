/**
 * Recording an attempt's outcome must not be lost to a PostgreSQL blip: if it were, the lease
 * would expire, the next claim would record the attempt as `interrupted` and send it again, and a
 * vote the receiver already acknowledged could even end `failed`. So a record that fails is tried
 * again with a short exponential backoff for as long as the claim's lease leaves room (minus a
 * margin); only then is the error passed on and the claim given up to the lease.
 *
 * Each try goes through the store, so retried records still share statements with the others.
 */
import { performance } from "node:perf_hooks";
import type { Db } from "@botdir/db";
import type { Clock } from "@botdir/service-kit";
import {
  attemptRecorded,
  type DeliveryStore,
  plannedResult,
  type RecordInput,
  type RecordResult,
} from "./deliveries.js";

/** First backoff after a failed record; doubles per failure up to RECORD_RETRY_MAX_MS (± jitter). */
export const RECORD_RETRY_BASE_MS = 50;
export const RECORD_RETRY_MAX_MS = 1_000;
/** The last try starts at least this long before the lease ends. */
export const RECORD_LEASE_MARGIN_MS = 500;

export interface DurableRecordDeps {
  store: DeliveryStore;
  db: Db;
  clock: Clock;
  /** Called before each retry (a warning in the log). */
  onRetry?: (failures: number, error: unknown, delayMs: number) => void;
}

export async function recordDurably(input: RecordInput, deps: DurableRecordDeps): Promise<RecordResult> {
  const leaseLeftMs = input.leaseUntil.getTime() - deps.clock.now().getTime() - RECORD_LEASE_MARGIN_MS;
  const giveUpAt = performance.now() + leaseLeftMs;
  let failures = 0;
  for (;;) {
    try {
      const result = await deps.store.record(input);
      // A failed try may have committed before its reply was lost: then the claim is gone because
      // our own record ended it, not because another replica took over.
      if (failures > 0 && result.kind === "superseded" && (await attemptRecorded(deps.db, input))) {
        return plannedResult(input);
      }
      return result;
    } catch (error) {
      failures++;
      const backoff = Math.min(RECORD_RETRY_MAX_MS, RECORD_RETRY_BASE_MS * 2 ** (failures - 1));
      const delayMs = Math.round(backoff * (0.5 + Math.random() / 2));
      if (performance.now() + delayMs > giveUpAt) throw error;
      deps.onRetry?.(failures, error, delayMs);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  }
}
