/**
 * The dispatcher's Prometheus series, served as GET /metrics on DISPATCHER_PORT: every recorded
 * attempt (outcome, error kind, attempt number, duration), the latency from the vote to its
 * delivery, and the queue depth (BullMQ job counts, read at scrape time with a short timeout;
 * every replica reports the same queue, so dashboards take max(), not sum()).
 */
import { QUEUES, WEBHOOK_MAX_ATTEMPTS } from "@botdir/schema";
import {
  Counter,
  createCounterSeries,
  createMetricsRegistry,
  createScrapeSources,
  Gauge,
  Histogram,
  type MetricsRegistryOptions,
  type Registry,
} from "@botdir/service-kit";
import type { Cap, FairnessSnapshot } from "./fairness.js";
import type { ErrorKind } from "./http-client.js";

/** What an attempt's recording ended as (src/deliveries.ts RecordResult). */
export type AttemptOutcome = "delivered" | "retry" | "failed" | "superseded";

export interface AttemptEvent {
  outcome: AttemptOutcome;
  attemptNumber: number;
  /** null on a 2xx answer. */
  errorKind: ErrorKind | null;
  /** Time the HTTP exchange took. */
  durationMs: number;
  /**
   * When the event happened (the vote, or the end of its window for vote.available), and when the
   * attempt was recorded: the delivery latency.
   */
  votedAt: Date;
  recordedAt: Date;
}

/** What the deliver handler reports to; tests and main.ts pass a DispatcherMetrics. */
export interface AttemptRecorder {
  attempt(event: AttemptEvent): void;
}

/** What the worker reports about its fairness caps (src/fairness.ts). */
export interface FairnessRecorder {
  /** A job found its webhook's or origin's cap full and was put back without an attempt. */
  deferred(cap: Cap): void;
  /** A parked job was promoted because its webhook or origin has room again. */
  woken(cap: Cap): void;
  /** Where the gauges read parked jobs and full caps at scrape time. */
  watchFairness(snapshot: () => FairnessSnapshot): void;
}

export interface DispatcherMetrics extends AttemptRecorder, FairnessRecorder {
  registry: Registry;
}

/** The fairness caps, each a label value of the deferred, woken, parked and full series. */
const CAPS: readonly Cap[] = ["webhook", "origin"];

/** BullMQ job states reported as queue depth. */
export const QUEUE_STATES = ["waiting", "delayed", "active"] as const;

export interface JobCountsSource {
  getJobCounts(...types: string[]): Promise<Record<string, number>>;
}

export interface DispatcherMetricsOptions extends MetricsRegistryOptions {
  /** A BullMQ Queue of the delivery queue (on a fail-fast connection), for the depth gauge. */
  queue?: JobCountsSource;
  /** Deadline of the scrape-time job count (default SCRAPE_TIMEOUT_MS). */
  scrapeTimeoutMs?: number;
}

/** Attempt durations: 10 ms to the 10 s reply timeout (and a little past it). */
export const ATTEMPT_DURATION_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15];
/** Vote → delivered: first attempts (under a second) through retries after 1 min, 5 min, 30 min, 2 h. */
export const DELIVERY_LATENCY_BUCKETS = [
  0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 10_800, 21_600,
];

export function createDispatcherMetrics(options: DispatcherMetricsOptions = {}): DispatcherMetrics {
  const registry = createMetricsRegistry("webhook-dispatcher", options);
  const attempts = new Counter({
    name: "botdir_webhook_attempts_total",
    help: "Recorded webhook attempts, by outcome (delivered, retry, failed, superseded), error kind (none on a 2xx) and attempt number (1-5).",
    labelNames: ["outcome", "error_kind", "attempt"],
    registers: [registry],
  });
  const attemptDuration = new Histogram({
    name: "botdir_webhook_attempt_duration_seconds",
    help: "Duration of one webhook HTTP exchange, by error kind (none on a 2xx).",
    labelNames: ["error_kind"],
    buckets: ATTEMPT_DURATION_BUCKETS,
    registers: [registry],
  });
  const latency = new Histogram({
    name: "botdir_webhook_delivery_latency_seconds",
    help: "Time from the vote to the attempt that delivered it, by the number of that attempt.",
    labelNames: ["attempt"],
    buckets: DELIVERY_LATENCY_BUCKETS,
    registers: [registry],
  });
  const deferred = createCounterSeries(registry, CAPS, {
    name: "botdir_webhook_jobs_deferred_total",
    help: "Jobs put back without an attempt because their bot's webhook (cap=webhook) or its origin (cap=origin) had its maximum of attempts in flight in this replica.",
    label: "cap",
  });
  const woken = createCounterSeries(registry, CAPS, {
    name: "botdir_webhook_jobs_woken_total",
    help: "Deferred jobs promoted to run at once because their webhook or origin had room again.",
    label: "cap",
  });
  let fairness: (() => FairnessSnapshot) | undefined;
  /** Per cap, one of the fairness snapshot's counts, read at scrape time (0 until watchFairness). */
  const capGauge = (name: string, help: string, counts: keyof FairnessSnapshot) =>
    new Gauge({
      name,
      help,
      labelNames: ["cap"],
      registers: [registry],
      collect() {
        const snap = fairness?.();
        for (const cap of CAPS) this.set({ cap }, snap?.[counts][cap] ?? 0);
      },
    });
  capGauge(
    "botdir_webhook_jobs_parked",
    "Deferred jobs this replica will promote when their webhook (cap=webhook) or origin (cap=origin) has room.",
    "parked",
  );
  capGauge(
    "botdir_webhook_caps_full",
    "Webhooks (cap=webhook) and origins (cap=origin) with their maximum of attempts in flight in this replica.",
    "atCap",
  );

  // Start the first attempt's delivered series at zero, so rate() and ratios work from the start;
  // and the unreadable-secret series, so that the first one after a start is an increase() for
  // BotdirWebhookSecretsUnreadable (a series born at 1 shows Prometheus no increase).
  attempts.inc({ outcome: "delivered", error_kind: "none", attempt: "1" }, 0);
  attempts.inc({ outcome: "failed", error_kind: "secret_unreadable", attempt: "1" }, 0);

  if (options.queue) {
    const { queue } = options;
    const counts = createScrapeSources(registry, options.scrapeTimeoutMs).add("queue", () =>
      queue.getJobCounts(...QUEUE_STATES),
    );
    new Gauge({
      name: "botdir_queue_jobs",
      help: "Jobs in the BullMQ queue by state (waiting, delayed, active), read at scrape time.",
      labelNames: ["queue", "state"],
      registers: [registry],
      async collect() {
        const value = await counts();
        this.reset();
        if (value === undefined) return;
        for (const state of QUEUE_STATES) {
          this.set({ queue: QUEUES.webhookDeliveries, state }, value[state] ?? 0);
        }
      },
    });
  }

  return {
    registry,
    deferred: (cap) => deferred[cap].inc(),
    woken: (cap) => woken[cap].inc(),
    watchFairness(snapshot) {
      fairness = snapshot;
    },
    attempt(event) {
      const errorKind = event.errorKind ?? "none";
      // Attempt numbers are 1..5 (interrupted attempts are recorded by the next claimer instead).
      const attempt = String(Math.min(Math.max(event.attemptNumber, 1), WEBHOOK_MAX_ATTEMPTS));
      attempts.inc({ outcome: event.outcome, error_kind: errorKind, attempt });
      attemptDuration.observe({ error_kind: errorKind }, event.durationMs / 1000);
      if (event.outcome === "delivered") {
        latency.observe(
          { attempt },
          Math.max(0, event.recordedAt.getTime() - event.votedAt.getTime()) / 1000,
        );
      }
    },
  };
}
