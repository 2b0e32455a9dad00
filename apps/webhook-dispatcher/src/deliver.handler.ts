/**
 * The `vote.create` job handler: claim the next attempt of a delivery in PostgreSQL, send it, record
 * the outcome. It knows nothing about BullMQ; src/worker.ts turns its result into job moves.
 */
import type { Db, SecretBox } from "@botdir/db";
import { type Clock, DeliveryJobData, describeError, type Logger } from "@botdir/schema";
import { createDeliveryStore, type DeliveryStore } from "./deliveries.js";
import { buildDeliveryRequest } from "./delivery-request.js";
import type { ErrorKind, SendAttempt } from "./http-client.js";
import type { AttemptRecorder } from "./metrics.js";
import type { RetryDelays } from "./schedule.js";

export interface DeliverDeps {
  db: Db;
  secrets: SecretBox;
  send: SendAttempt;
  clock: Clock;
  logger: Logger;
  retryDelays: RetryDelays;
  /** How long a claimed attempt is protected: the HTTP timeout plus a margin. */
  leaseMs: number;
  /** A job this early (or less) before next_attempt_at still runs. */
  earlySlackMs?: number;
  /** Counts every recorded attempt (Prometheus); optional so unit tests can leave it out. */
  metrics?: AttemptRecorder;
  /** Claims and records attempts (batched by the worker); default: one statement per attempt. */
  store?: DeliveryStore;
}

export type DeliverResult =
  /** Nothing (more) to do: delivered or failed already, unknown, or no webhook configured. */
  | { kind: "done"; reason: string }
  /** Not now: look again at `until` (the attempt is not due yet, or another one is in flight). */
  | { kind: "wait"; until: Date }
  | { kind: "delivered"; attemptNumber: number }
  | { kind: "retry"; attemptNumber: number; errorKind: ErrorKind | null; nextAttemptAt: Date }
  | { kind: "failed"; attemptNumber: number; errorKind: ErrorKind | null }
  /** Our claim expired and another replica took the delivery over; nothing was recorded. */
  | { kind: "superseded"; attemptNumber: number };

export const EARLY_SLACK_MS = 250;

export function createDeliverHandler(deps: DeliverDeps) {
  const earlySlackMs = deps.earlySlackMs ?? EARLY_SLACK_MS;
  const store = deps.store ?? createDeliveryStore(deps.db, { maxBatch: 1, maxInFlight: 1 });

  return async function deliver(raw: unknown): Promise<DeliverResult> {
    const parsed = DeliveryJobData.safeParse(raw);
    if (!parsed.success) {
      deps.logger.error({ data: describeError(parsed.error) }, "webhook job with invalid data dropped");
      return { kind: "done", reason: "invalid_job" };
    }
    const { deliveryId } = parsed.data;

    const claim = await store.claim(deliveryId, {
      now: deps.clock.now(),
      leaseMs: deps.leaseMs,
      earlySlackMs,
      retryDelays: deps.retryDelays,
      decryptSecret: (stored) => deps.secrets.decrypt(stored),
    });
    switch (claim.kind) {
      case "done":
        if (claim.reason === "no_webhook") {
          deps.logger.warn({ deliveryId }, "webhook removed before delivery; delivery marked failed");
        }
        return claim;
      case "busy":
        return { kind: "wait", until: claim.until };
      case "early":
        return { kind: "wait", until: claim.at };
      case "claimed":
        break;
    }

    const { target, attemptNumber, leaseUntil } = claim;
    const attemptedAt = deps.clock.now();
    const outcome = await deps.send(buildDeliveryRequest({ ...target, deliveryId }));
    const recordedAt = deps.clock.now();
    const recorded = await store.record({
      deliveryId,
      botId: target.botId,
      attemptNumber,
      leaseUntil,
      attemptedAt,
      outcome,
      now: recordedAt,
      retryDelays: deps.retryDelays,
    });
    deps.metrics?.attempt({
      outcome: recorded.kind,
      attemptNumber,
      errorKind: outcome.errorKind,
      durationMs: outcome.durationMs,
      votedAt: target.votedAt,
      recordedAt,
    });

    const log = {
      deliveryId,
      botId: target.botId,
      attempt: attemptNumber,
      status: outcome.statusCode,
      errorKind: outcome.errorKind,
      ms: outcome.durationMs,
    };
    switch (recorded.kind) {
      case "delivered":
        deps.logger.info(log, "webhook delivered");
        return { kind: "delivered", attemptNumber };
      case "retry":
        deps.logger.info(
          { ...log, nextAttemptAt: recorded.nextAttemptAt },
          "webhook attempt failed; will retry",
        );
        return {
          kind: "retry",
          attemptNumber,
          errorKind: outcome.errorKind,
          nextAttemptAt: recorded.nextAttemptAt,
        };
      case "failed":
        deps.logger.warn(log, "webhook attempt failed; no attempts left, delivery failed");
        return { kind: "failed", attemptNumber, errorKind: outcome.errorKind };
      case "superseded":
        deps.logger.warn(
          log,
          "webhook attempt outlived its claim; another replica took over, result dropped",
        );
        return { kind: "superseded", attemptNumber };
    }
  };
}

export type DeliverHandler = ReturnType<typeof createDeliverHandler>;
