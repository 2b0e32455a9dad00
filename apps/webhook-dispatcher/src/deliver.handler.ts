/**
 * The `vote.create` job handler: claim the next attempt of a delivery in PostgreSQL, send it, record
 * the outcome. It knows nothing about BullMQ; src/worker.ts turns its result into job moves.
 */
import { type Db, deliveryTraceId, type SecretBox } from "@botdir/db";
import { DeliveryJobData } from "@botdir/schema";
import {
  activeSpanRecorded,
  type Clock,
  describeError,
  failSpan,
  inSpan,
  type Logger,
  loggerWith,
  SpanKind,
  traceIdOf,
  traceIdOfSpan,
  tracesExported,
} from "@botdir/service-kit";
import {
  DEFAULT_DEAD_ENDPOINT_RULES,
  type DeadEndpointRules,
  disableGone,
  disableIfDead,
  GONE_STATUS,
} from "./dead-endpoints.js";
import { createDeliveryStore, type DeliveryStore, type DeliveryTarget } from "./deliveries.js";
import { buildDeliveryRequest } from "./delivery-request.js";
import type { AttemptOutcome, ErrorKind, SendAttempt } from "./http-client.js";
import type { AttemptRecorder } from "./metrics.js";
import { recordDurably } from "./record-durably.js";
import type { RetryDelays } from "./schedule.js";
import { recordUnreadableSecret } from "./secret-unreadable.js";

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
  /** When a webhook counts as dead and is disabled (default DEFAULT_DEAD_ENDPOINT_RULES). */
  deadEndpoints?: DeadEndpointRules;
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

/** Decrypted webhook secrets kept per replica (see cachedDecryption); the oldest goes first. */
export const DECRYPTED_SECRETS_KEPT = 10_000;

/**
 * `secrets.decrypt` remembered per stored value: a bot's secret is decrypted once, not once per
 * attempt. A stored value is the ciphertext under one key of the ring, so the same value always
 * decrypts to the same secret with this replica's ring (fixed at start-up); a rotated secret is a
 * new value. Failures are not remembered (they throw every time, as before). The secrets are
 * already held in memory by the signing key objects (@botdir/signing).
 */
export function cachedDecryption(secrets: Pick<SecretBox, "decrypt">): (stored: string) => string {
  const kept = new Map<string, string>();
  return (stored) => {
    let secret = kept.get(stored);
    if (secret === undefined) {
      secret = secrets.decrypt(stored);
      if (kept.size >= DECRYPTED_SECRETS_KEPT) kept.delete(kept.keys().next().value as string);
      kept.set(stored, secret);
    }
    return secret;
  };
}

export function createDeliverHandler(deps: DeliverDeps) {
  const earlySlackMs = deps.earlySlackMs ?? EARLY_SLACK_MS;
  const deadEndpoints = deps.deadEndpoints ?? DEFAULT_DEAD_ENDPOINT_RULES;
  const store = deps.store ?? createDeliveryStore(deps.db, { maxBatch: 1, maxInFlight: 1 });
  const decryptSecret = cachedDecryption(deps.secrets);

  /**
   * `onClaimed` learns where the claimed attempt goes (per-origin fairness, src/fairness.ts);
   * `onSent` how the HTTP attempt itself went, before it is recorded (its duration tells a slow
   * receiver from a slow claim or record).
   */
  async function deliverParsed(
    data: DeliveryJobData,
    onClaimed?: (target: DeliveryTarget) => void,
    onSent?: (outcome: AttemptOutcome) => void,
  ): Promise<DeliverResult> {
    const { deliveryId } = data;

    // Spans (docs/tracing.md): webhook.claim, the POST (client span) and webhook.record, children
    // of the job's consumer span. The claim and record statements are shared by the attempts of a
    // turn (createDeliveryStore batches them): each span is this attempt's wait for its statement.
    // They are leaves (`leaf`): no context is entered for them, so a line logged inside one (a
    // record's retry) carries the consumer span's ids. Where nothing is exported, a delivery runs in no context (one per delivery cost the drain
    // ≈ 4 % of the dispatcher's CPU, docs/performance.md), so inSpan makes none of these spans: the
    // delivery's trace id, for X-Webhook-Trace and its log lines' `trace_id`, is the job's stored
    // one, or for a job that carries none the one the delivery id names (deliveryTraceId).
    // (Where the job's trace is recorded, the delivery runs in its consumer span: the log mixin adds
    // the span's ids and X-Webhook-Trace is the span's trace id, the same one.)
    const traceId = traceIdOf(data.traceparent) ?? deliveryTraceId(deliveryId);
    const logger =
      tracesExported() && activeSpanRecorded() ? deps.logger : loggerWith(deps.logger, { trace_id: traceId });
    const claim = await inSpan(
      "webhook.claim",
      { attributes: { "botdir.delivery_id": deliveryId }, leaf: true },
      async (span) => {
        const claimed = await store.claim(deliveryId, {
          now: deps.clock.now(),
          leaseMs: deps.leaseMs,
          earlySlackMs,
          retryDelays: deps.retryDelays,
          decryptSecret,
        });
        span.setAttribute("botdir.claim", claimed.kind);
        return claimed;
      },
    );
    switch (claim.kind) {
      case "done":
        if (claim.reason === "no_webhook") {
          logger.warn({ deliveryId }, "webhook removed before delivery; delivery marked failed");
        }
        if (claim.reason === "endpoint_disabled") {
          logger.info({ deliveryId }, "webhook disabled (dead or gone); delivery marked failed");
        }
        return claim;
      case "busy":
        return { kind: "wait", until: claim.until };
      case "early":
        return { kind: "wait", until: claim.at };
      case "unreadable":
        return recordUnreadableSecret(deliveryId, claim, { ...deps, store, logger });
      case "claimed":
        break;
    }

    const { target, attemptNumber, leaseUntil } = claim;
    onClaimed?.(target);
    const attemptedAt = deps.clock.now();
    const outcome = await inSpan(
      "POST",
      {
        kind: SpanKind.CLIENT,
        // Never the receiver's path or query (they may carry the owner's own secrets), nor a header.
        attributes: {
          "http.request.method": "POST",
          "botdir.delivery_id": deliveryId,
          "botdir.bot_id": target.botId,
          "botdir.attempt": attemptNumber,
          "botdir.webhook_event": target.event,
        },
        leaf: true,
      },
      async (span) => {
        // X-Webhook-Trace: the trace of this span (the delivery's), else the job's (no span made).
        const sent = await deps.send(
          buildDeliveryRequest(target, attemptedAt, traceIdOfSpan(span) ?? traceId),
        );
        if (sent.statusCode !== null) span.setAttribute("http.response.status_code", sent.statusCode);
        if (sent.errorKind !== null) failSpan(span, sent.errorKind);
        return sent;
      },
    );
    onSent?.(outcome);
    const recordedAt = deps.clock.now();
    const recorded = await inSpan(
      "webhook.record",
      { attributes: { "botdir.delivery_id": deliveryId }, leaf: true },
      () =>
        recordDurably(
          {
            deliveryId,
            botId: target.botId,
            attemptNumber,
            leaseUntil,
            attemptedAt,
            outcome,
            now: recordedAt,
            retryDelays: deps.retryDelays,
          },
          {
            store,
            db: deps.db,
            clock: deps.clock,
            onRetry: (failures, error, delayMs) =>
              logger.warn(
                {
                  deliveryId,
                  botId: target.botId,
                  attempt: attemptNumber,
                  failures,
                  delayMs,
                  err: describeError(error),
                },
                "recording the webhook attempt failed; retrying within the claim",
              ),
          },
        ),
    );
    deps.metrics?.attempt({
      outcome: recorded.kind,
      attemptNumber,
      errorKind: outcome.errorKind,
      durationMs: outcome.durationMs,
      votedAt: target.eventAt,
      recordedAt,
    });

    const log = {
      deliveryId,
      event: target.event,
      botId: target.botId,
      attempt: attemptNumber,
      status: outcome.statusCode,
      errorKind: outcome.errorKind,
      ms: outcome.durationMs,
    };
    if (recorded.kind === "retry" || recorded.kind === "failed") {
      const gone = outcome.statusCode === GONE_STATUS;
      const check = gone
        ? disableGone(deps.db, { botId: target.botId, url: target.url, attemptedAt, now: recordedAt })
        : disableIfDead(deps.db, target.botId, recordedAt, deadEndpoints);
      const dead = await check.catch((error) => {
        logger.error({ ...log, err: describeError(error) }, "dead-endpoint check failed");
        return null;
      });
      if (dead?.disabled) {
        logger.warn(
          { botId: target.botId, endedDeliveries: dead.endedDeliveries },
          gone
            ? "webhook disabled: the receiver answered 410 Gone; pending deliveries failed"
            : "webhook disabled: every attempt failed for the whole window; pending deliveries failed",
        );
        return { kind: "failed", attemptNumber, errorKind: outcome.errorKind };
      }
    }
    switch (recorded.kind) {
      case "delivered":
        logger.info(log, "webhook delivered");
        return { kind: "delivered", attemptNumber };
      case "retry":
        logger.info({ ...log, nextAttemptAt: recorded.nextAttemptAt }, "webhook attempt failed; will retry");
        return {
          kind: "retry",
          attemptNumber,
          errorKind: outcome.errorKind,
          nextAttemptAt: recorded.nextAttemptAt,
        };
      case "failed":
        logger.warn(log, "webhook attempt failed; no attempts left, delivery failed");
        return { kind: "failed", attemptNumber, errorKind: outcome.errorKind };
      case "superseded":
        logger.warn(log, "webhook attempt outlived its claim; another replica took over, result dropped");
        return { kind: "superseded", attemptNumber };
    }
  }

  async function deliver(
    raw: unknown,
    onClaimed?: (target: DeliveryTarget) => void,
    onSent?: (outcome: AttemptOutcome) => void,
  ): Promise<DeliverResult> {
    const parsed = DeliveryJobData.safeParse(raw);
    if (!parsed.success) {
      deps.logger.error({ data: describeError(parsed.error) }, "webhook job with invalid data dropped");
      return { kind: "done", reason: "invalid_job" };
    }
    return deliverParsed(parsed.data, onClaimed, onSent);
  }
  /** The same for data already parsed as DeliveryJobData (the worker parses each job once). */
  return Object.assign(deliver, { parsed: deliverParsed });
}

export type DeliverHandler = ReturnType<typeof createDeliverHandler>;
