/**
 * The series the three apps define, read from their own metric registries (built with stand-in
 * sources): what the alert rules and the dashboard may select.
 */
import { createApiMetrics } from "../../apps/api/src/metrics.js";
import { createIngestMetrics } from "../../apps/vote-ingest/src/metrics.js";
import { createDispatcherMetrics } from "../../apps/webhook-dispatcher/src/metrics.js";

/** Each metric the apps define, with its label names; `processMetrics` as main.ts turns them on. */
export function appSeries(options: { processMetrics?: boolean } = {}): Map<string, string[]> {
  const registries = [
    createApiMetrics(options).registry,
    createIngestMetrics({
      outbox: {
        backlog: async () => ({ pending: 0, oldestAgeMs: 0 }),
        stats: () => ({ ticks: 0, handedOff: 0, skipped: 0, errors: 0, redisAvailable: true }),
      },
    }).registry,
    createDispatcherMetrics({ queue: { getJobCounts: async () => ({}) } }).registry,
  ];
  const series = new Map(
    registries.flatMap((r) =>
      r
        .getMetricsAsArray()
        .map((m) => [m.name, (m as unknown as { labelNames: string[] }).labelNames] as const),
    ),
  );
  // serve() adds botdir_ready to every app's registry (packages/service-kit/src/serve.ts).
  series.set("botdir_ready", []);
  return series;
}
