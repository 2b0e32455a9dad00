/**
 * The BullMQ worker of the `webhook-deliveries` queue. It runs the deliver handler and maps its
 * result onto the job: a failed attempt that will be retried fails the job so the custom `webhook`
 * backoff delays it until the next_attempt_at written to PostgreSQL; a delivery that is not due yet
 * (or whose attempt is in flight elsewhere) is moved back to delayed without using an attempt.
 *
 * A `vote.batch` job (first attempts of several deliveries, packages/schema/src/jobs.ts) runs each
 * item through the same path, items concurrently. An item the batch cannot finish (over a fairness
 * cap, not due or in flight elsewhere, a failed attempt to retry, an error) is handed to a
 * `vote.create` job of its own (jobId = the delivery id, delayed until it may run, carrying the
 * attempts that remain), and the batch completes. Should that add fail, the delivery stays pending
 * in PostgreSQL and the outbox relay hands it off once it is stale. Every attempt, of either job
 * kind, holds one of the replica's DISPATCHER_CONCURRENCY attempt slots (src/attempt-slots.ts). A
closing worker finishes the attempts it started; those still waiting for a slot go back to the
queue (a batch item to a job of its own), so a shutdown is not held up by a batch's later items.
 *
 * Fairness (src/fairness.ts): before the claim, a job takes a slot of its bot's webhook and of its
 * origin. When either is full the job is moved back to delayed (no attempt claimed, no worker slot
 * held) and parked in this replica; when a slot of that webhook or origin ends, the job parked
 * longest is promoted and runs at once. Its delay is only the fallback: the time by which the
 * oldest attempt holding the cap must have ended (a replica that dies forgets what it parked).
 */
import { performance } from "node:perf_hooks";
import { type Db, deliveryTraceparent, type SecretBox } from "@botdir/db";
import {
  DeliveryBatchJobData,
  type DeliveryHandOff,
  DeliveryJobData,
  deliveryJob,
  JOBS,
  type JobName,
  QUEUES,
} from "@botdir/schema";
import {
  type Clock,
  contextOf,
  describeError,
  inSpan,
  type Link,
  type Logger,
  type RedisClient,
  recordedUnder,
  SpanKind,
  spanContextOf,
  storedTraceLogFields,
  traceparentOf,
  tracesExported,
} from "@botdir/service-kit";
import type { Resolver } from "@botdir/webhook-targets";
import { DelayedError, type Job, Queue, Worker } from "bullmq";
import { createAttemptSlots } from "./attempt-slots.js";
import type { DeadEndpointRules } from "./dead-endpoints.js";
import { createDeliverHandler, type DeliverResult } from "./deliver.handler.js";
import { botOfDelivery, createDeliveryStore } from "./deliveries.js";
import { type Admission, type Cap, capOf, createFairness, type Pace, paceOf } from "./fairness.js";
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

/** What a `vote.batch` job did with its items. */
export interface BatchResult {
  kind: "batch";
  /** Items that ended in the batch (delivered, failed, nothing to do, superseded). */
  finished: number;
  /** Items handed to a `vote.create` job of their own. */
  handedOff: number;
  /** Items whose own job could not be added (left to the outbox relay). */
  left: number;
}

export type DispatcherWorker = Worker<DeliveryJobData | DeliveryBatchJobData, DeliverResult | BatchResult>;

/**
 * An attempt's claim in PostgreSQL outlives the HTTP timeout by one lock duration: a live worker
 * always records its outcome before anyone else may take over, and a dead worker's attempt becomes
 * claimable about when BullMQ notices the stalled job.
 */
export function leaseMs(config: Pick<DispatcherConfig, "timeoutMs" | "lockDurationMs">): number {
  return config.timeoutMs + config.lockDurationMs;
}

type Refusal = Extract<Admission, { ok: false }>;

/**
 * One delivery through fairness and the handler: refused by a cap, not started because the worker
 * is closing, or the handler's result.
 */
type AttemptRun =
  | { kind: "refused"; refusal: Refusal }
  | { kind: "closing" }
  | { kind: "ran"; result: DeliverResult };

export function createDispatcherWorker(deps: DispatcherDeps, config: DispatcherConfig): DispatcherWorker {
  const send = createWebhookSender({
    timeoutMs: config.timeoutMs,
    allowPrivateTargets: config.allowPrivateTargets,
    ...(config.resolver ? { resolver: config.resolver } : {}),
    ...(config.dnsTimeoutMs === undefined ? {} : { dnsTimeoutMs: config.dnsTimeoutMs }),
    ...(config.dnsServers ? { dnsServers: config.dnsServers } : {}),
  });
  type DeliveryJob = Job<DeliveryJobData | DeliveryBatchJobData, DeliverResult | BatchResult>;
  const slowMs = config.slowAttemptMs ?? DEFAULT_SLOW_ATTEMPT_MS;
  // Parked: a `vote.create` job moved back to delayed, or the job a refused batch item was handed to.
  const fairness = createFairness<Pick<Job, "promote">>({
    perWebhook: config.maxInFlightPerWebhook ?? DEFAULT_MAX_IN_FLIGHT_PER_WEBHOOK,
    perOrigin: config.maxInFlightPerOrigin ?? DEFAULT_MAX_IN_FLIGHT_PER_ORIGIN,
    holdMs: leaseMs(config),
    slowMs,
  });
  deps.metrics?.watchFairness?.(() => fairness.snapshot());
  const slots = createAttemptSlots(config.concurrency);
  let closing = false;
  // Adds the `vote.create` jobs of batch items, on the worker's connection (closed with the worker).
  const producer = new Queue(QUEUES.webhookDeliveries, {
    connection: deps.redis,
    prefix: config.queuePrefix,
    skipVersionCheck: true,
  });
  producer.on("error", (error) =>
    deps.logger.error({ err: describeError(error) }, "webhook producer queue error"),
  );

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

  /** Parks a delayed job on a full cap, and wakes it at once if a slot ended meanwhile. */
  function park(refusal: Refusal, job: Pick<Job, "promote">): void {
    fairness.park(refusal.key, job);
    // A slot may have ended while the job was being moved: then nobody would wake it.
    if (fairness.hasRoom(refusal.key)) void wake(refusal.key, refusal.cap);
  }

  /** The bot a job is for: named by the job, or (jobs handed off before they named it) read. */
  async function botOf(data: DeliveryJobData): Promise<string | null> {
    return data.botId ?? botOfDelivery(deps.db, data.deliveryId);
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

  /**
   * One delivery's attempt, the same for a `vote.create` job and a batch item: an attempt slot of
   * the replica, a slot of its webhook and origin (or the cap that refused it), the handler.
   * `data` has been parsed as DeliveryJobData.
   */
  async function attempt(data: DeliveryJobData, botId: string | null): Promise<AttemptRun> {
    await slots.acquire();
    try {
      // A closing worker waits for the attempts it started, not for those still waiting for a
      // slot (a batch's items can queue many timeouts deep): they go back to the queue.
      if (closing) return { kind: "closing" };
      const admission = botId === null ? null : fairness.admit(botId);
      if (admission && !admission.ok) {
        deps.metrics?.deferred?.(admission.cap);
        return { kind: "refused", refusal: admission };
      }
      const ticket = admission?.ticket;
      let pace: Pace | undefined;
      let answeredInMs: number | undefined;
      const started = performance.now();
      try {
        const result = await deliver.parsed(
          data,
          ticket ? (target) => fairness.learn(ticket, target.url) : undefined,
          (outcome) => {
            answeredInMs = outcome.durationMs;
          },
        );
        // The receiver's pace is its HTTP attempt's duration, not claim + attempt + record: a slow
        // PostgreSQL must not make every webhook look slow and cut it to one slot.
        pace = paceOf(result, answeredInMs ?? performance.now() - started, slowMs);
        return { kind: "ran", result };
      } finally {
        if (ticket) {
          // One parked job per free slot: a webhook that just answered quickly for the first time
          // has gone from one slot to its full cap. (No wake without a parked job: an origin's
          // free slots are often many more than the jobs parked on it.)
          for (const key of fairness.release(ticket, pace)) {
            const parked = fairness.parkedOn(key);
            if (parked === 0) continue;
            for (let n = Math.min(fairness.room(key), parked); n > 0; n--) void wake(key, capOf(key));
          }
        }
      }
    } finally {
      slots.release();
    }
  }

  /**
   * A `vote.create` job in its consumer span: a child of the context the job carries (the hand-off's
   * producer span, in the delivery's trace), so a retry minutes or hours later is in the same trace.
   * Where nothing is exported, or the sampler does not record the job's trace, no span and no
   * context: the handler takes the delivery's trace id from the job (createDeliverHandler).
   */
  function processDelivery(job: DeliveryJob, token?: string): Promise<DeliverResult> {
    if (!tracesExported()) return processDeliveryInSpan(job, token);
    const data = job.data as Partial<DeliveryJobData>;
    // A job without a context (its row keeps none): the trace the delivery id names.
    const parent =
      typeof data.traceparent === "string"
        ? data.traceparent
        : typeof data.deliveryId === "string"
          ? deliveryTraceparent(data.deliveryId)
          : null;
    if (!recordedUnder(parent)) return processDeliveryInSpan(job, token);
    return inSpan(
      `${QUEUES.webhookDeliveries} process`,
      {
        kind: SpanKind.CONSUMER,
        parent: contextOf(parent),
        // Moved back to delayed (not due, in flight elsewhere, over a fairness cap): not a failure.
        expected: (error) => error instanceof DelayedError,
        attributes: {
          "messaging.system": "bullmq",
          "messaging.operation.type": "process",
          "messaging.destination.name": QUEUES.webhookDeliveries,
          "messaging.message.id": job.id ?? "",
          "botdir.job_attempt": job.attemptsMade + 1,
          ...(typeof data.deliveryId === "string" ? { "botdir.delivery_id": data.deliveryId } : {}),
          ...(typeof data.botId === "string" ? { "botdir.bot_id": data.botId } : {}),
        },
      },
      () => processDeliveryInSpan(job, token),
    );
  }

  async function processDeliveryInSpan(job: DeliveryJob, token?: string): Promise<DeliverResult> {
    const parsed = DeliveryJobData.safeParse(job.data);
    // The handler logs and drops what does not parse (no slot, no fairness: nothing is sent).
    if (!parsed.success) return deliver(job.data);
    const run = await attempt(parsed.data, await botOf(parsed.data));
    if (run.kind === "refused") {
      await job.moveToDelayed(deps.clock.now().getTime() + run.refusal.retryInMs, token);
      park(run.refusal, job);
      throw new DelayedError();
    }
    if (run.kind === "closing") {
      await job.moveToDelayed(deps.clock.now().getTime(), token);
      throw new DelayedError();
    }
    const { result } = run;
    switch (result.kind) {
      case "wait":
        await job.moveToDelayed(result.until.getTime(), token);
        throw new DelayedError();
      case "retry":
        throw new AttemptFailed(result.attemptNumber, result.nextAttemptAt, result.errorKind ?? "unknown");
      default:
        return result;
    }
  }

  /**
   * Hands a batch item to a `vote.create` job of its own (jobId = delivery id: a no-op while the
   * relay's or a previous run's job for it exists). False when Redis did not take it.
   */
  async function handOffAlone(handOff: DeliveryHandOff, refusal?: Refusal): Promise<boolean> {
    const now = deps.clock.now();
    try {
      const { name, data, opts } = deliveryJob(handOff, now);
      const job = await producer.add(name, data, opts);
      if (refusal) park(refusal, job);
      return true;
    } catch (error) {
      deps.logger.warn(
        {
          deliveryId: handOff.id,
          ...storedTraceLogFields(handOff.traceparent ?? deliveryTraceparent(handOff.id)),
          err: describeError(error),
        },
        "could not hand a batch item to its own job; it stays pending and the outbox relay hands it off again",
      );
      return false;
    }
  }

  /**
   * A batch item in its own span (`webhook.deliver`), a child of the item's context: the vote's
   * trace holds its attempt whichever job carried it; the span links back to the batch's. Where
   * nothing is exported, no span and no context, as for a `vote.create` job.
   */
  function processItem(item: DeliveryJobData, batch: Link[]): Promise<"finished" | "handedOff" | "left"> {
    if (!tracesExported()) return processItemInSpan(item);
    const parent = item.traceparent ?? deliveryTraceparent(item.deliveryId);
    if (!recordedUnder(parent)) return processItemInSpan(item);
    return inSpan(
      "webhook.deliver",
      {
        parent: contextOf(parent),
        links: batch,
        attributes: {
          "botdir.delivery_id": item.deliveryId,
          ...(item.botId ? { "botdir.bot_id": item.botId } : {}),
        },
      },
      () => processItemInSpan(item),
    );
  }

  /** One batch item: "finished" in the batch, "handedOff" to its own job, or "left" to the relay. */
  async function processItemInSpan(item: DeliveryJobData): Promise<"finished" | "handedOff" | "left"> {
    const id = item.deliveryId;
    const traced = item.traceparent ? { traceparent: item.traceparent } : {};
    const handed = (ok: boolean) => (ok ? "handedOff" : "left");
    let botId: string | undefined = item.botId;
    let run: AttemptRun;
    try {
      botId ??= (await botOf(item)) ?? undefined;
      run = await attempt(item, botId ?? null);
    } catch (error) {
      // What a `vote.create` job's failure would do (no attempt recorded): try again after the
      // first retry delay, in a job of its own.
      deps.logger.error(
        {
          deliveryId: id,
          ...storedTraceLogFields(item.traceparent ?? deliveryTraceparent(id)),
          err: describeError(error),
        },
        "webhook batch item failed",
      );
      const at = new Date(deps.clock.now().getTime() + (config.retryDelays[0] ?? 60_000));
      return handed(
        await handOffAlone({
          id,
          ...(botId ? { botId } : {}),
          ...traced,
          attemptsMade: 0,
          nextAttemptAt: at,
        }),
      );
    }
    const alone = (attemptsMade: number, nextAttemptAt: Date, refusal?: Refusal) =>
      handOffAlone({ id, ...(botId ? { botId } : {}), ...traced, attemptsMade, nextAttemptAt }, refusal);
    if (run.kind === "refused") {
      // Parked like a refused `vote.create` job; its delay is the fallback should no slot wake it.
      const at = new Date(deps.clock.now().getTime() + run.refusal.retryInMs);
      return handed(await alone(0, at, run.refusal));
    }
    if (run.kind === "closing") return handed(await alone(0, deps.clock.now()));
    const { result } = run;
    switch (result.kind) {
      case "wait":
        // Not due yet, or its attempt runs elsewhere (a re-run batch whose lease is held): the
        // attempts made are not known here, so the job carries them all (PostgreSQL counts).
        return handed(await alone(0, result.until));
      case "retry":
        return handed(await alone(result.attemptNumber, result.nextAttemptAt));
      default:
        return "finished";
    }
  }

  /**
   * A `vote.batch` job's consumer span starts a trace of its own and links to each item's context
   * (OpenTelemetry's messaging conventions for a batch); each item's work is in its vote's trace.
   * The items run outside the batch's context (`leaf`): an item its own trace does not record
   * makes no span and carries its own trace id (X-Webhook-Trace, the delivery log), as with tracing
   * off, whether the batch's trace is recorded or not.
   */
  function processBatch(job: DeliveryJob): Promise<BatchResult> {
    // Nothing exported: no span, no context (each item's trace id is its own, from its data).
    if (!tracesExported()) return processBatchInSpan(job, []);
    const items = (job.data as Partial<DeliveryBatchJobData>).deliveries;
    return inSpan(
      `${QUEUES.webhookDeliveries} process`,
      {
        kind: SpanKind.CONSUMER,
        root: true,
        leaf: true,
        attributes: {
          "messaging.system": "bullmq",
          "messaging.operation.type": "process",
          "messaging.destination.name": QUEUES.webhookDeliveries,
          "messaging.message.id": job.id ?? "",
          "messaging.batch.message_count": Array.isArray(items) ? items.length : 0,
        },
      },
      (span) => {
        // Not recorded: no links to read, and none back from the items.
        if (!span.isRecording()) return processBatchInSpan(job, []);
        for (const item of Array.isArray(items) ? items : []) {
          const linked = spanContextOf(typeof item?.traceparent === "string" ? item.traceparent : null);
          if (linked) span.addLink({ context: linked });
        }
        const back = spanContextOf(traceparentOf(span.spanContext()));
        return processBatchInSpan(job, back ? [{ context: back }] : []);
      },
    );
  }

  async function processBatchInSpan(job: DeliveryJob, batch: Link[]): Promise<BatchResult> {
    const parsed = DeliveryBatchJobData.safeParse(job.data);
    if (!parsed.success) {
      deps.logger.error(
        { jobId: job.id, data: describeError(parsed.error) },
        "webhook batch job with invalid data dropped",
      );
      return { kind: "batch", finished: 0, handedOff: 0, left: 0 };
    }
    const ends = await Promise.all(parsed.data.deliveries.map((item) => processItem(item, batch)));
    const count = (end: string) => ends.filter((e) => e === end).length;
    return { kind: "batch", finished: count("finished"), handedOff: count("handedOff"), left: count("left") };
  }

  const processor = async (job: DeliveryJob, token?: string): Promise<DeliverResult | BatchResult> => {
    if (!(job.name in JOBS)) {
      deps.logger.error({ jobId: job.id, name: job.name }, "unknown job name on the webhook queue; dropped");
      return { kind: "done", reason: "unknown_job" };
    }
    return job.name === ("vote.batch" satisfies JobName) ? processBatch(job) : processDelivery(job, token);
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
  // Idle keep-alive connections to receivers go once the worker has finished its last attempt;
  // the producer queue shares the worker's connection, so closing it releases only its listeners.
  worker.on("closing", () => {
    closing = true;
  });
  worker.on("closed", () => {
    send.close();
    void producer.close().catch(() => {});
  });
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
