/**
 * The BullMQ worker of the `webhook-deliveries` queue. It runs the deliver handler and maps its
 * result onto the job: a failed attempt that will be retried fails the job so the custom `webhook`
 * backoff delays it until the next_attempt_at written to PostgreSQL; a delivery that is not due yet
 * (or whose attempt is in flight elsewhere) is moved back to delayed without using an attempt.
 *
 * Fairness (src/fairness.ts): before the claim, a job takes a slot of its bot's webhook and of its
 * origin. When either is full the job is moved back to delayed (no attempt claimed, no worker slot
 * held) and parked in this replica; when a slot of that webhook or origin ends, the job parked
 * longest is promoted and runs at once. Its delay is only the fallback: the time by which the
 * oldest attempt holding the cap must have ended (a replica that dies forgets what it parked).
 */
import { performance } from "node:perf_hooks";
import type { Db, SecretBox } from "@botdir/db";
import { DeliveryJobData, JOBS, QUEUES } from "@botdir/schema";
import { type Clock, describeError, type Logger, type RedisClient } from "@botdir/service-kit";
import type { Resolver } from "@botdir/webhook-targets";
import { DelayedError, type Job, Worker } from "bullmq";
import type { DeadEndpointRules } from "./dead-endpoints.js";
import { createDeliverHandler, type DeliverResult } from "./deliver.handler.js";
import { botOfDelivery, createDeliveryStore } from "./deliveries.js";
import { type Cap, capOf, createFairness, type Pace, paceOf } from "./fairness.js";
import { createWebhookSender } from "./http-client.js";
import type { AttemptRecorder, FairnessRecorder } from "./metrics.js";
import { AttemptFailed, createBackoffStrategy, type RetryDelays } from "./schedule.js";

export interface DispatcherConfig {
  /** BullMQ prefix, QUEUE_PREFIX (DEFAULT_QUEUE_PREFIX in production). */
  queuePrefix: string;
  concurrency: number;
  timeoutMs: number;
  retryDelays: RetryDelays;
  allowPrivateTargets: boolean;
  lockDurationMs: number;
  stalledIntervalMs: number;
  /**
   * Most attempts whose claims (or records) share one statement (DISPATCHER_DB_BATCH_MAX); 1 sends
   * one statement per attempt. Default 1.
   */
  dbBatchMax?: number;
  /** Claim statements (and record statements) executing at once when batching (default 2). */
  dbBatchInFlight?: number;
  /** Tests inject DNS answers. */
  resolver?: Resolver;
  /** WEBHOOK_DISABLE_AFTER_MS / WEBHOOK_DISABLE_MIN_DELIVERIES (default 5 days, 5 deliveries). */
  deadEndpoints?: DeadEndpointRules;
  /** WEBHOOK_DNS_TIMEOUT_MS (default: 3 s, or half of timeoutMs when that is less). */
  dnsTimeoutMs?: number;
  /** WEBHOOK_DNS_SERVERS: nameservers instead of /etc/resolv.conf's. */
  dnsServers?: readonly string[];
  /** DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK (default DEFAULT_MAX_IN_FLIGHT_PER_WEBHOOK). */
  maxInFlightPerWebhook?: number;
  /** DISPATCHER_MAX_IN_FLIGHT_PER_ORIGIN (default DEFAULT_MAX_IN_FLIGHT_PER_ORIGIN). */
  maxInFlightPerOrigin?: number;
  /** DISPATCHER_SLOW_ATTEMPT_MS (default DEFAULT_SLOW_ATTEMPT_MS): see src/fairness.ts. */
  slowAttemptMs?: number;
}

export const DEFAULT_MAX_IN_FLIGHT_PER_WEBHOOK = 4;
export const DEFAULT_MAX_IN_FLIGHT_PER_ORIGIN = 32;
export const DEFAULT_SLOW_ATTEMPT_MS = 2_000;

export interface DispatcherDeps {
  db: Db;
  /**
   * Redis for the worker (maxRetriesPerRequest: null, no auto-pipelining); BullMQ duplicates it
   * for its blocking connection. The caller closes it.
   */
  redis: RedisClient;
  secrets: SecretBox;
  clock: Clock;
  logger: Logger;
  /** Prometheus series of this replica (attempt outcomes, durations, latency, deferred jobs). */
  metrics?: AttemptRecorder & Partial<FairnessRecorder>;
}

export type DispatcherWorker = Worker<DeliveryJobData, DeliverResult>;

/**
 * An attempt's claim in PostgreSQL outlives the HTTP timeout by one lock duration: a live worker
 * always records its outcome before anyone else may take over, and a dead worker's attempt becomes
 * claimable about when BullMQ notices the stalled job.
 */
export function leaseMs(config: Pick<DispatcherConfig, "timeoutMs" | "lockDurationMs">): number {
  return config.timeoutMs + config.lockDurationMs;
}

export function createDispatcherWorker(deps: DispatcherDeps, config: DispatcherConfig): DispatcherWorker {
  const send = createWebhookSender({
    timeoutMs: config.timeoutMs,
    allowPrivateTargets: config.allowPrivateTargets,
    ...(config.resolver ? { resolver: config.resolver } : {}),
    ...(config.dnsTimeoutMs === undefined ? {} : { dnsTimeoutMs: config.dnsTimeoutMs }),
    ...(config.dnsServers ? { dnsServers: config.dnsServers } : {}),
  });
  type DeliveryJob = Job<DeliveryJobData, DeliverResult>;
  const slowMs = config.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS;
  const fairness = createFairness<DeliveryJob>({
    perWebhook: config.maxInFlightPerWebhook ?? DEFAULT_MAX_IN_FLIGHT_PER_WEBHOOK,
    perOrigin: config.maxInFlightPerOrigin ?? DEFAULT_MAX_IN_FLIGHT_PER_ORIGIN,
    holdMs: leaseMs(config),
    slowMs,
  });
  deps.metrics?.watchFairness?.(() => fairness.snapshot());

  /** Promotes the job parked longest on `key` (skipping ones no longer delayed: run elsewhere). */
  async function wake(key: string, cap: Cap): Promise<void> {
    for (let tries = 0; tries < 5; tries++) {
      const job = fairness.unpark(key);
      if (!job) return;
      try {
        await job.promote();
        deps.metrics?.woken?.(cap);
        return;
      } catch {
        // promoted by its own delay, taken by another replica, or finished: try the next one
      }
    }
  }

  /** The bot a job is for: named by the job, or (jobs handed off before they named it) read. */
  async function botOf(data: unknown): Promise<string | null> {
    const parsed = DeliveryJobData.safeParse(data);
    if (!parsed.success) return null;
    return parsed.data.botId ?? botOfDelivery(deps.db, parsed.data.deliveryId);
  }
  const deliver = createDeliverHandler({
    db: deps.db,
    secrets: deps.secrets,
    clock: deps.clock,
    logger: deps.logger,
    retryDelays: config.retryDelays,
    leaseMs: leaseMs(config),
    metrics: deps.metrics,
    send,
    ...(config.deadEndpoints ? { deadEndpoints: config.deadEndpoints } : {}),
    store: createDeliveryStore(deps.db, {
      maxBatch: config.dbBatchMax ?? 1,
      maxInFlight: config.dbBatchInFlight ?? 2,
    }),
  });

  const processor = async (
    job: Job<DeliveryJobData, DeliverResult>,
    token?: string,
  ): Promise<DeliverResult> => {
    if (!(job.name in JOBS)) {
      deps.logger.error({ jobId: job.id, name: job.name }, "unknown job name on the webhook queue; dropped");
      return { kind: "done", reason: "unknown_job" };
    }
    const botId = await botOf(job.data);
    const admission = botId === null ? null : fairness.admit(botId);
    if (admission && !admission.ok) {
      deps.metrics?.deferred?.(admission.cap);
      await job.moveToDelayed(deps.clock.now().getTime() + admission.retryInMs, token);
      fairness.park(admission.key, job);
      // A slot may have ended while the job was being moved: then nobody would wake it.
      if (fairness.hasRoom(admission.key)) void wake(admission.key, admission.cap);
      throw new DelayedError();
    }
    const ticket = admission?.ticket;
    let result: DeliverResult;
    let pace: Pace | undefined;
    let answeredInMs: number | undefined;
    const started = performance.now();
    try {
      result = await deliver(
        job.data,
        ticket ? (target) => fairness.learn(ticket, target.url) : undefined,
        (outcome) => {
          answeredInMs = outcome.durationMs;
        },
      );
      // The receiver's pace is its HTTP attempt's duration, not claim + attempt + record: a slow
      // PostgreSQL must not make every webhook look slow and cut it to one slot.
      pace = paceOf(result, answeredInMs ?? performance.now() - started, slowMs);
    } finally {
      if (ticket) {
        // One parked job per free slot: a webhook that just answered quickly for the first time
        // has gone from one slot to its full cap.
        for (const key of fairness.release(ticket, pace)) {
          for (let n = fairness.room(key); n > 0; n--) void wake(key, capOf(key));
        }
      }
    }
    switch (result.kind) {
      case "wait":
        await job.moveToDelayed(result.until.getTime(), token);
        throw new DelayedError();
      case "retry":
        throw new AttemptFailed(result.attemptNumber, result.nextAttemptAt, result.errorKind ?? "unknown");
      default:
        return result;
    }
  };

  const worker: DispatcherWorker = new Worker(QUEUES.webhookDeliveries, processor, {
    connection: deps.redis,
    prefix: config.queuePrefix,
    concurrency: config.concurrency,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    settings: {
      backoffStrategy: createBackoffStrategy(config.retryDelays, () => deps.clock.now().getTime()),
    },
  });
  // Idle keep-alive connections to receivers go once the worker has finished its last attempt.
  worker.on("closed", () => send.close());
  worker.on("error", (error) => deps.logger.error({ err: describeError(error) }, "webhook worker error"));
  worker.on("failed", (job, error) => {
    const outOfAttempts = job !== undefined && job.attemptsMade >= (job.opts.attempts ?? 1);
    if (error instanceof AttemptFailed || error.name === "AttemptFailed") {
      // The attempt itself was logged by the handler. BullMQ gives up on the job only when errors
      // that used no attempt ate its tries; the delivery is still pending in PostgreSQL.
      if (outOfAttempts) {
        deps.logger.warn(
          { jobId: job?.id },
          "job out of BullMQ tries; the outbox relay will hand it off again",
        );
      }
      return;
    }
    deps.logger.error(
      { jobId: job?.id, err: describeError(error), final: outOfAttempts },
      "webhook job failed",
    );
  });
  return worker;
}
