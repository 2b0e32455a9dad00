/**
 * The producer side of the delivery queue. PostgreSQL holds the truth (the outbox row); a BullMQ job
 * is only a nudge for the dispatcher, so handing off never blocks or fails a vote: when Redis is
 * unavailable the add is skipped at once and the outbox relay hands the delivery off later.
 */
import { type Db, deliveryTraceparent } from "@botdir/db";
import {
  DELIVERY_BATCH_MAX,
  type DeliveryHandOff,
  deliveryBatchJob,
  deliveryJob,
  QUEUES,
} from "@botdir/schema";
import {
  contextOf,
  describeError,
  type Logger,
  type RedisClient,
  recordedUnder,
  SpanKind,
  startSpan,
  traceparentOf,
  tracesExported,
  withTimeout,
} from "@botdir/service-kit";
import { Queue } from "bullmq";

export interface DeliveryQueueOptions {
  db: Db;
  /**
   * A connection owned by the caller, created fail-fast: `enableOfflineQueue: false` and a small
   * `maxRetriesPerRequest`, so an add fails immediately while Redis is down instead of queueing.
   */
  redis: RedisClient;
  /** BullMQ key prefix: DEFAULT_QUEUE_PREFIX in production, testRedisPrefix()-based in tests. */
  prefix: string;
  logger: Logger;
  /** Upper bound of one add, in case Redis accepts the connection but does not answer. */
  addTimeoutMs?: number;
  /** How long request-path hand-offs are gathered before handed_off_at is written in one UPDATE. */
  markBatchMs?: number;
  /**
   * DELIVERY_JOB_BATCH_MAX: most due request-path hand-offs of one event-loop turn carried by one
   * `vote.batch` job; 1 adds one `vote.create` job per delivery. Default DEFAULT_DELIVERY_JOB_BATCH_MAX.
   */
  batchMax?: number;
}

export const DEFAULT_DELIVERY_JOB_BATCH_MAX = 16;

export interface DeliveryQueue {
  /**
   * Adds one `vote.create` job per delivery (jobId = delivery id). True when Redis took them all;
   * never throws.
   */
  add(deliveries: readonly DeliveryHandOff[], now: Date): Promise<boolean>;
  /**
   * The after-commit hand-off of the request path: add (the due hand-offs of one event-loop turn
   * in `vote.batch` jobs, see handOffJobs), and on success record handed_off_at
   * (batched; a lost mark only means the relay adds the job again, which is a no-op).
   */
  handOff(delivery: DeliveryHandOff, now: Date): Promise<boolean>;
  /** False while the Redis connection is not usable; callers skip the work instead of waiting. */
  isReady(): boolean;
  /** Writes pending handed_off_at marks now. */
  flush(): Promise<void>;
  /** Flushes the marks and closes the Queue (the Redis connection stays the caller's). */
  close(): Promise<void>;
  /** The BullMQ queue, for inspection (tests, metrics). */
  readonly queue: Queue;
}

type BulkJob = Parameters<Queue["addBulk"]>[0][number];

const noEnd = () => {};

/**
 * The producer span of one delivery's hand-off (`webhook-deliveries publish`), a child of the
 * context the delivery was created under (its row's traceparent, carried as `delivery.traceparent`),
 * so the request path, the relay and a redelivery all continue the delivery's trace. The job carries
 * the producer span's own context. `end(ok)` ends it once Redis took the job or not.
 */
function publishSpan(delivery: DeliveryHandOff): { delivery: DeliveryHandOff; end: (ok: boolean) => void } {
  // Where nothing is exported the span would be ids only, leading nowhere: the job carries the
  // delivery's own context (its row's; none where the row keeps none: the dispatcher then takes the
  // trace the delivery id names, deliveryTraceparent).
  // The same where the sampler does not record the delivery's trace.
  const parent = delivery.traceparent ?? deliveryTraceparent(delivery.id);
  if (!tracesExported() || !recordedUnder(parent)) return { delivery, end: noEnd };
  const span = startSpan(
    `${QUEUES.webhookDeliveries} publish`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        "messaging.system": "bullmq",
        "messaging.operation.type": "send",
        "messaging.destination.name": QUEUES.webhookDeliveries,
        "messaging.message.id": delivery.id,
        "botdir.delivery_id": delivery.id,
        ...(delivery.botId ? { "botdir.bot_id": delivery.botId } : {}),
      },
    },
    contextOf(parent),
  );
  const traceparent = traceparentOf(span.spanContext());
  return {
    delivery: traceparent ? { ...delivery, traceparent } : delivery,
    end: (ok) => {
      if (!ok) span.setAttribute("error.type", "queue_unavailable");
      span.end();
    },
  };
}

/**
 * The jobs of one turn's hand-offs: those due now (no delay) in `vote.batch` jobs of at most
 * `batchMax` items, sized evenly (17 with a maximum of 16 are 9 + 8, not 16 + 1); a group of one,
 * and every delayed delivery, as its own `vote.create` job.
 */
export function handOffJobs(
  items: readonly { delivery: DeliveryHandOff; now: Date }[],
  batchMax: number,
): BulkJob[] {
  const jobs: BulkJob[] = [];
  const due: { delivery: DeliveryHandOff; now: Date }[] = [];
  for (const item of items) {
    if (batchMax > 1 && item.delivery.nextAttemptAt.getTime() <= item.now.getTime()) due.push(item);
    else jobs.push(deliveryJob(item.delivery, item.now));
  }
  const groups = Math.ceil(due.length / batchMax);
  for (let g = 0; g < groups; g++) {
    const group = due.slice(
      Math.floor((g * due.length) / groups),
      Math.floor(((g + 1) * due.length) / groups),
    );
    const [only] = group;
    if (group.length === 1 && only) {
      jobs.push(deliveryJob(only.delivery, only.now));
      continue;
    }
    jobs.push(deliveryBatchJob(group.map(({ delivery }) => delivery)));
  }
  return jobs;
}

export function createDeliveryQueue(options: DeliveryQueueOptions): DeliveryQueue {
  const { db, redis, logger } = options;
  const addTimeoutMs = options.addTimeoutMs ?? 1_000;
  const markBatchMs = options.markBatchMs ?? 20;
  const batchMax = Math.min(
    DELIVERY_BATCH_MAX,
    Math.max(1, options.batchMax ?? DEFAULT_DELIVERY_JOB_BATCH_MAX),
  );
  // skipWaitingForReady + skipVersionCheck: the Queue must not wait for (or query) Redis when it
  // is created, or every add would hang until Redis came back.
  const queue = new Queue(QUEUES.webhookDeliveries, {
    connection: redis,
    prefix: options.prefix,
    skipWaitingForReady: true,
    skipVersionCheck: true,
  });
  queue.on("error", () => {}); // connection errors surface as failed adds; the relay logs outages

  let marks: { id: string; at: Date }[] = [];
  let markTimer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();

  async function writeMarks(batch: { id: string; at: Date }[]): Promise<void> {
    if (batch.length === 0) return;
    try {
      await db.pool.query(
        `UPDATE webhook_deliveries AS d SET handed_off_at = m.at
           FROM unnest($1::uuid[], $2::timestamptz[]) AS m(id, at)
          WHERE d.id = m.id AND (d.handed_off_at IS NULL OR d.handed_off_at < m.at)`,
        [batch.map((m) => m.id), batch.map((m) => m.at.toISOString())],
      );
    } catch (error) {
      logger.warn({ err: describeError(error), count: batch.length }, "could not record hand-off");
    }
  }

  function flush(): Promise<void> {
    if (markTimer) clearTimeout(markTimer);
    markTimer = undefined;
    const batch = marks;
    marks = [];
    flushing = flushing.then(() => writeMarks(batch));
    return flushing;
  }

  /** One addBulk of `jobs` (one MULTI, one round trip). */
  async function addJobs(jobs: readonly BulkJob[]): Promise<boolean> {
    if (jobs.length === 0) return true;
    if (redis.status !== "ready") return false;
    try {
      await withTimeout(queue.addBulk([...jobs]), addTimeoutMs);
      return true;
    } catch {
      return false;
    }
  }

  // The relay (and botctl) add one `vote.create` job per delivery: its jobId dedupes a second
  // hand-off of a delivery whose job still exists.
  const add = async (deliveries: readonly DeliveryHandOff[], now: Date) => {
    // While Redis is down the relay skips its ticks here, before any span: no failed hand-off per tick.
    if (deliveries.length === 0 || redis.status !== "ready") return deliveries.length === 0;
    const published = deliveries.map(publishSpan);
    const ok = await addJobs(published.map((p) => deliveryJob(p.delivery, now)));
    for (const p of published) p.end(ok);
    return ok;
  };

  // Request-path hand-offs of one event-loop turn go to Redis as one addBulk (one MULTI, one
  // round trip) instead of one add per vote: the votes of a batched cast statement commit
  // together, so their hand-offs arrive together. Those due now share `vote.batch` jobs (each job
  // costs Redis the same add, move to active and finish, whatever it carries). An idle server adds
  // no wait (setImmediate).
  let pending: {
    delivery: DeliveryHandOff;
    now: Date;
    end: (ok: boolean) => void;
    resolve: (ok: boolean) => void;
  }[] = [];
  async function handOffPending(): Promise<void> {
    const batch = pending;
    pending = [];
    const ok = await addJobs(handOffJobs(batch, batchMax));
    if (ok) {
      for (const p of batch) marks.push({ id: p.delivery.id, at: p.now });
      markTimer ??= setTimeout(() => void flush(), markBatchMs);
    }
    for (const p of batch) {
      p.end(ok);
      p.resolve(ok);
    }
  }

  return {
    queue,
    add,
    isReady: () => redis.status === "ready",
    handOff(delivery, now) {
      return new Promise<boolean>((resolve) => {
        if (pending.length === 0) setImmediate(() => void handOffPending());
        pending.push({ ...publishSpan(delivery), now, resolve });
      });
    },
    flush,
    async close() {
      await flush();
      await queue.close();
    },
  };
}
