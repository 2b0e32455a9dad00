/**
 * vote-ingest's Prometheus series, served as GET /metrics on the internal listener (INGEST_PORT):
 * HTTP requests, and the outbox (pending deliveries, how late the most overdue one is, what the
 * relay of this replica did). The outbox gauges are read from PostgreSQL at scrape time with a
 * short timeout; every replica reports the same outbox, so dashboards take max(), not sum().
 */
import {
  Counter,
  createBatchMetrics,
  createHttpMetrics,
  createMetricsRegistry,
  createScrapeSources,
  Gauge,
  type HttpMetrics,
  type MetricsRegistryOptions,
  type Registry,
} from "@botdir/service-kit";
import type { OutboxBacklog, OutboxRelayStats } from "./outbox/relay.js";

export interface IngestMetrics {
  registry: Registry;
  http: HttpMetrics;
  /** Counts one vote-casting statement of `size` votes (createBatchMetrics, statement="cast-vote"). */
  castBatch(size: number): void;
}

export interface IngestMetricsSources {
  /** The outbox relay of this replica (its backlog() query and its counters). */
  outbox?: { backlog(): Promise<OutboxBacklog>; stats(): OutboxRelayStats };
  /** Deadline of the scrape-time backlog query (default SCRAPE_TIMEOUT_MS). */
  scrapeTimeoutMs?: number;
}

export function createIngestMetrics(
  sources: IngestMetricsSources = {},
  options: MetricsRegistryOptions = {},
): IngestMetrics {
  const registry = createMetricsRegistry("vote-ingest", options);
  const { outbox } = sources;
  if (outbox) registerOutbox(registry, outbox, sources.scrapeTimeoutMs);
  return {
    registry,
    http: createHttpMetrics(registry),
    castBatch: createBatchMetrics(registry, ["cast-vote"])["cast-vote"],
  };
}

function registerOutbox(
  registry: Registry,
  outbox: NonNullable<IngestMetricsSources["outbox"]>,
  timeoutMs: number | undefined,
): void {
  const backlog = createScrapeSources(registry, timeoutMs).add("outbox", () => outbox.backlog());
  new Gauge({
    name: "botdir_outbox_pending_deliveries",
    help: "Webhook deliveries in state pending (due now or waiting for a retry), from PostgreSQL.",
    registers: [registry],
    async collect() {
      const value = await backlog();
      this.set(value === undefined ? Number.NaN : value.pending); // NaN: unknown, never a stale 0
    },
  });
  new Gauge({
    name: "botdir_outbox_oldest_due_age_seconds",
    help: "How late the most overdue pending delivery is (now - next_attempt_at); 0 when none is overdue.",
    registers: [registry],
    async collect() {
      const value = await backlog();
      this.set(value === undefined ? Number.NaN : value.oldestAgeMs / 1000);
    },
  });

  // The relay's own counters live in the relay; they are copied at scrape time.
  const counter = (name: string, help: string, read: (s: OutboxRelayStats) => number) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read(outbox.stats()));
      },
    });
  counter("botdir_outbox_relay_ticks_total", "Outbox relay passes run by this replica.", (s) => s.ticks);
  counter(
    "botdir_outbox_relay_handed_off_total",
    "Deliveries this replica's relay handed to the queue (never handed off, or lost from Redis).",
    (s) => s.handedOff,
  );
  counter(
    "botdir_outbox_relay_skipped_total",
    "Relay passes skipped or rolled back because Redis was unavailable.",
    (s) => s.skipped,
  );
  counter("botdir_outbox_relay_errors_total", "Relay passes that failed with an error.", (s) => s.errors);
  new Gauge({
    name: "botdir_outbox_relay_redis_available",
    help: "1 while the relay of this replica can reach Redis, 0 while it is paused.",
    registers: [registry],
    collect() {
      this.set(outbox.stats().redisAvailable ? 1 : 0);
    },
  });
}
