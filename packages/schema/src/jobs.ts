/**
 * The typed job catalog: every queue and job name with its payload schema and options. The
 * producer (vote-ingest, its outbox relay, botctl) and the consumer (webhook-dispatcher) both read
 * it, so they cannot drift apart.
 *
 * Contract of a delivery job:
 * - one BullMQ job per webhook delivery, job name `vote.create`, data `{deliveryId, botId, traceparent}`,
 *   jobId = the delivery id, so handing the same delivery off twice is a no-op while the job exists;
 *   `botId` lets the dispatcher apply its per-webhook cap before it claims an attempt (jobs handed
 *   off before it existed lack it; the dispatcher then reads the bot from the delivery row);
 * - PostgreSQL holds the truth (state, attempts made, next attempt time); a job is only a nudge.
 *   The handler re-reads the delivery row and does nothing for a delivery that is no longer pending;
 * - finished jobs are removed, so the outbox relay can hand a lost delivery off again.
 *
 * Contract of a batch job (first attempts only):
 * - job name `vote.batch`, data `{deliveries: DeliveryJobData[]}` (2 to DELIVERY_BATCH_MAX items in
 *   practice, 1 accepted), no jobId of ours: vote-ingest gathers the due hand-offs of one event-loop
 *   turn into one job, so a delivered vote costs a share of one add / move-to-active / finish;
 * - the dispatcher runs every item like a `vote.create` job; an item it cannot finish in the batch
 *   (over a fairness cap, lease held elsewhere, failed attempt to retry) is handed to an individual
 *   `vote.create` job (jobId = the delivery id), so retries are scheduled one delivery at a time;
 * - re-running a batch is harmless: the claims in PostgreSQL make a delivered item `done`.
 */
import { z } from "zod";
import { WEBHOOK_MAX_ATTEMPTS } from "./webhook.js";

export const DEFAULT_QUEUE_PREFIX = "{botdir}"; // hash-tagged: every queue key in one Redis Cluster slot

export const QUEUES = { webhookDeliveries: "webhook-deliveries" } as const;

export const DeliveryJobData = z.object({
  deliveryId: z.uuid(),
  // A hint (the delivery row is the truth), so it is not held to BotId's format: a job is never
  // dropped over its hint.
  botId: z.string().min(1).max(64).optional(),
  /**
   * The W3C context of the hand-off (the producer span), so the dispatcher's spans continue the
   * vote's trace; in a `vote.batch` job one per item (the batch's span links to each). A hint too:
   * absent or malformed, the attempt simply starts a trace of its own.
   */
  traceparent: z.string().max(64).optional(),
});
export type DeliveryJobData = z.infer<typeof DeliveryJobData>;

/** Most deliveries one `vote.batch` job carries. */
export const DELIVERY_BATCH_MAX = 32;

export const DeliveryBatchJobData = z.object({
  deliveries: z.array(DeliveryJobData).min(1).max(DELIVERY_BATCH_MAX),
});
export type DeliveryBatchJobData = z.infer<typeof DeliveryBatchJobData>;

export interface JobDefinition {
  queue: string;
  data: z.ZodType;
  attempts: number;
  backoff: { type: string };
}

export const JOBS = {
  "vote.create": {
    queue: QUEUES.webhookDeliveries,
    data: DeliveryJobData,
    attempts: WEBHOOK_MAX_ATTEMPTS,
    backoff: { type: "webhook" },
  },
  // A batch only fails when its processor throws unexpectedly (its items' attempts never fail it):
  // a few tries, then the outbox relay hands what is left off again.
  "vote.batch": {
    queue: QUEUES.webhookDeliveries,
    data: DeliveryBatchJobData,
    attempts: 3,
    backoff: { type: "webhook" },
  },
} as const satisfies Record<string, JobDefinition>;

export type JobName = keyof typeof JOBS;

export interface DeliveryHandOff {
  id: string;
  /** The delivery's bot, carried in the job (per-webhook fairness in the dispatcher). */
  botId?: string;
  attemptsMade: number;
  nextAttemptAt: Date;
  /** The W3C context the job carries (the hand-off's producer span), when traced. */
  traceparent?: string;
}

/** The job data of a delivery hand-off. */
export function deliveryJobData(
  delivery: Pick<DeliveryHandOff, "id" | "botId" | "traceparent">,
): DeliveryJobData {
  const data: DeliveryJobData = { deliveryId: delivery.id };
  if (delivery.botId !== undefined) data.botId = delivery.botId;
  if (delivery.traceparent !== undefined) data.traceparent = delivery.traceparent;
  return data;
}

/** The `vote.create` job of one delivery (name, data, options), as every producer adds it. */
export function deliveryJob(delivery: DeliveryHandOff, now: Date) {
  return {
    name: "vote.create" satisfies JobName,
    data: deliveryJobData(delivery),
    opts: deliveryJobOptions(delivery, now),
  };
}

/** The `vote.batch` job of deliveries due now (first attempts). */
export function deliveryBatchJob(
  deliveries: readonly Pick<DeliveryHandOff, "id" | "botId" | "traceparent">[],
) {
  return {
    name: "vote.batch" satisfies JobName,
    data: { deliveries: deliveries.map(deliveryJobData) } satisfies DeliveryBatchJobData,
    opts: deliveryBatchJobOptions(),
  };
}

/** BullMQ options of a `vote.batch` job (due now; BullMQ names it). */
export function deliveryBatchJobOptions() {
  return {
    attempts: JOBS["vote.batch"].attempts,
    backoff: JOBS["vote.batch"].backoff,
    removeOnComplete: true,
    removeOnFail: true,
  };
}

/**
 * BullMQ options for handing a delivery to the queue: the job waits until the delivery's next
 * attempt time and carries only the attempts that remain (the attempt count lives in PostgreSQL).
 */
export function deliveryJobOptions(delivery: DeliveryHandOff, now: Date) {
  return {
    jobId: delivery.id,
    delay: Math.max(0, delivery.nextAttemptAt.getTime() - now.getTime()),
    attempts: Math.max(1, JOBS["vote.create"].attempts - delivery.attemptsMade),
    backoff: JOBS["vote.create"].backoff,
    removeOnComplete: true,
    removeOnFail: true,
  };
}
