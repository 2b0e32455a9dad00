/**
 * What `pnpm bench` prints: the headline table (the cost of a delivered vote and the read paths
 * against their targets), the per-process table of a delivered vote, the hot paths against the
 * floor, and one line per other scenario.
 */
import { FLOOD_LIMIT, type FloodResult } from "./scenarios/flood.js";
import type { HostileResult } from "./scenarios/hostile.js";
import type { WebhookMixResult } from "./scenarios/mix.js";
import type { PathsResult } from "./scenarios/paths.js";
import type { WebhookResult } from "./scenarios/webhook.js";

/** The figures the performance targets are set on (docs/performance.md); null: not measured. */
export interface Headline {
  /** `webhook-mix` ingest ÷ the same rounds with no dispatcher (target ≥ 0.65). */
  pipelineRatio: number | null;
  /** µs per delivered vote: dispatcher + what delivery adds in PostgreSQL and Redis (≤ 225). */
  deliverySideUs: number | null;
  dispatcherUs: number | null;
  /**
   * Draining a full queue: the dispatcher's CPU per delivery ÷ its floor's (got sending the same
   * signed requests at the same concurrency with the same log line, src/sender-floor.ts).
   */
  dispatcherVsSenderFloor: number | null;
  /** What delivery adds in PostgreSQL (≤ 40) and Redis (≤ 25), µs per delivered vote. */
  postgresAddedUs: number | null;
  redisAddedUs: number | null;
  /** Redis commands per delivered vote that delivery adds (INFO commandstats). */
  redisCommandsAdded: number | null;
  /** Ours ÷ the floor (targets ≥ 0.6 and ≥ 0.45). */
  checkVsFloor: number | null;
  statsVsFloor: number | null;
  /**
   * The floor with its I/O (src/floor.ts: the token's hash, one Redis and one PostgreSQL round
   * trip per batch) ÷ the bare floor, req/s in alternating rounds: what a /check or /stats built on
   * Express, ioredis and node-postgres reaches of the bare floor; then ours ÷ that floor.
   */
  checkIoFloorVsFloor: number | null;
  checkVsIoFloor: number | null;
  statsIoFloorVsFloor: number | null;
  statsVsIoFloor: number | null;
}

export function headlineOf(paths: PathsResult, mix: WebhookMixResult | null): Headline {
  const v = mix?.perDeliveredVote;
  return {
    pipelineRatio: v?.pipelineRatio ?? null,
    deliverySideUs: v?.deliverySide ?? null,
    dispatcherUs: v?.withDispatcher.dispatcher ?? null,
    dispatcherVsSenderFloor: mix?.ingestAlone.dispatcherVsSenderFloor ?? null,
    postgresAddedUs: v?.deliveryAdds.postgres ?? null,
    redisAddedUs: v?.deliveryAdds.redis ?? null,
    redisCommandsAdded: v?.redisCommands.deliveryAdds.total ?? null,
    checkVsFloor: paths.paths["GET /check"]?.ratio ?? null,
    statsVsFloor: paths.paths["POST /stats"]?.ratio ?? null,
    checkIoFloorVsFloor: ioFloorVsFloor(paths, "GET /check"),
    checkVsIoFloor: paths.paths["GET /check vs the floor with its I/O"]?.ratio ?? null,
    statsIoFloorVsFloor: ioFloorVsFloor(paths, "POST /stats"),
    statsVsIoFloor: paths.paths["POST /stats vs the floor with its I/O"]?.ratio ?? null,
  };
}

function ioFloorVsFloor(paths: PathsResult, name: string): number | null {
  return paths.paths[`${name} vs the floor with its I/O`]?.bareFloor?.ioFloorVsBare ?? null;
}

interface Report extends PathsResult {
  machine: { node: string; appNode: string };
  headline: Headline;
  webhook: WebhookResult;
  webhookMix: WebhookMixResult | null;
  hostile: HostileResult | null;
  flood?: FloodResult;
  memoryMb: Record<string, { max: number; first: number; last: number }>;
  durationS: number;
}

const shown = (x: number | null, unit = "") => (x === null ? "not run" : `${x}${unit}`);

export function printReport(report: Report, file: string): void {
  const h = report.headline;
  const mix = report.webhookMix;
  const v = mix?.perDeliveredVote;
  const lines = [
    "",
    `Apps under Node ${report.machine.appNode} (bench ${report.machine.node})`,
    "",
    "| figure | measured | target |",
    "|---|---|---|",
    `| pipeline ratio: webhook-mix ingest ÷ the same rounds with no dispatcher | ${shown(h.pipelineRatio)} | ≥ 0.65 |`,
    `| delivery side per delivered vote (dispatcher + what delivery adds in PostgreSQL and Redis) | ${shown(h.deliverySideUs, " µs")} | ≤ 225 µs |`,
    `| of which the dispatcher process | ${shown(h.dispatcherUs, " µs")} | ≤ 160 µs |`,
    `| the dispatcher ÷ its floor (got sending the same signed requests), draining | ${shown(h.dispatcherVsSenderFloor, "×")} | |`,
    `| of which PostgreSQL / Redis added by delivery | ${shown(h.postgresAddedUs)} / ${shown(h.redisAddedUs, " µs")} | ≤ 40 / ≤ 25 µs |`,
    `| GET /check vs the floor | ${shown(h.checkVsFloor, "×")} | ≥ 0.6× |`,
    `| the floor with /check's I/O vs the floor; ours vs the floor with its I/O | ${shown(h.checkIoFloorVsFloor, "×")}; ${shown(h.checkVsIoFloor, "×")} | |`,
    `| POST /stats vs the floor | ${shown(h.statsVsFloor, "×")} | ≥ 0.45× |`,
    `| the floor with /stats's I/O vs the floor; ours vs the floor with its I/O | ${shown(h.statsIoFloorVsFloor, "×")}; ${shown(h.statsVsIoFloor, "×")} | |`,
    "",
  ];
  if (v) {
    const row = (name: string, k: "ingest" | "dispatcher" | "postgres" | "redis" | "loadGenerator") =>
      `| ${name} | ${k === "dispatcher" ? "–" : `${v.noDispatcher[k]} µs`} | ${v.withDispatcher[k]} µs | ${v.deliveryAdds[k]} µs |`;
    const commands = (byCommand: Record<string, number>) =>
      Object.entries(byCommand)
        .slice(0, 12)
        .map(([c, n]) => `${c} ${n}`)
        .join(", ");
    lines.push(
      "| CPU per vote | no dispatcher (recording only) | dispatcher delivering every vote | what delivery adds |",
      "|---|---|---|---|",
      row("ingest", "ingest"),
      row("dispatcher", "dispatcher"),
      row("PostgreSQL", "postgres"),
      row("Redis", "redis"),
      row("load generator + receiver", "loadGenerator"),
      `| **delivery side** | | | **${v.deliverySide} µs** |`,
      "",
      `Redis commands per vote: ${v.redisCommands.noDispatcher.total} recording only, ${v.redisCommands.withDispatcher.total} delivering, ${v.redisCommands.deliveryAdds.total} added by delivery`,
      `  added by delivery: ${commands(v.redisCommands.deliveryAdds.byCommand)}`,
      `  recording only: ${commands(v.redisCommands.noDispatcher.byCommand)}`,
      `PostgreSQL transactions per vote: ${v.postgresTransactions.noDispatcher} recording only, ${v.postgresTransactions.withDispatcher} delivering`,
      `draining a full queue with no votes cast, CPU µs per delivery: dispatcher ${mix.ingestAlone.drainCpuMicrosecondsPerDelivery.dispatcher}, PostgreSQL ${mix.ingestAlone.drainCpuMicrosecondsPerDelivery.postgres}, Redis ${mix.ingestAlone.drainCpuMicrosecondsPerDelivery.redis}; the dispatcher's floor (src/sender-floor.ts) ${mix.ingestAlone.senderFloorCpuMicrosecondsPerDelivery.got}, with Node's client instead of got ${mix.ingestAlone.senderFloorCpuMicrosecondsPerDelivery.node}; requests the floor did not deliver: got ${mix.ingestAlone.senderFloorLost.got}, node ${mix.ingestAlone.senderFloorLost.node} of ${mix.ingestAlone.senderFloorSent} each`,
      `GC µs per delivered vote: ingest ${mix.gcMicrosecondsPerVote.ingest ?? "?"}, dispatcher ${mix.gcMicrosecondsPerVote.dispatcher ?? "?"}`,
      "",
    );
  }
  lines.push(
    "| path | ours req/s | floor req/s | ratio | ours p50/p99 ms | floor p50/p99 ms | p99 ratio |",
    "|---|---|---|---|---|---|---|",
    ...Object.entries(report.paths).map(
      ([name, r]) =>
        `| ${name} | ${r.ours.rps} | ${r.floor.rps} | ${r.ratio}× | ${r.ours.p50} / ${r.ours.p99} | ${r.floor.p50} / ${r.floor.p99} | ${r.p99Ratio}× |`,
    ),
    "",
    "CPU µs per request, server / postgres / redis / load generator (the floor's PostgreSQL and Redis only with its I/O)",
    ...Object.entries(report.cpuMicrosecondsPerRequest).map(
      ([name, c]) =>
        `  ${name}: ours ${c.ours.server} / ${c.ours.postgres} / ${c.ours.redis} / ${c.ours.loadGenerator}; floor ${c.floor.server} / ${c.floor.postgres} / ${c.floor.redis} / ${c.floor.loadGenerator}`,
    ),
    "",
    `ingest durability: ${report.ingestDurability.recorded} recorded of ${report.ingestDurability.acknowledged} acknowledged`,
    `vote → webhook: ${Object.entries(report.webhook.throughput)
      .map(([k, t]) => `${k} ${t.perSecond}/s`)
      .join(
        ", ",
      )}; latency at 500/s p50 ${report.webhook.latencyAt500PerSecond.p50} ms, p99 ${report.webhook.latencyAt500PerSecond.p99} ms`,
    mix
      ? `webhook-mix: pipeline ratio ${mix.pipelineRatio}; ingest ${mix.ratio}× of the floor (${mix.ingestAlone.ratio}× with no dispatcher), ${mix.delivered}/${mix.recorded} recorded votes delivered, ${mix.deliveriesPerSecondWhileCasting} deliveries/s while casting`
      : "webhook-mix: not run",
    report.hostile
      ? `hostile: healthy p99 ${report.hostile.healthyLatencyMs.p99} ms at 500 votes/s (target < 250 ms), drain ${report.hostile.drain.perSecond} healthy deliveries/s (target ≥ 1,000)`
      : "hostile: not run",
    report.flood
      ? `flood (real token, limit ${FLOOD_LIMIT}/min; goal ≥ 540 and ≤ 600 answered 200, p99 ≤ 250 ms): ${report.flood.rounds
          .map(
            (r) =>
              `${r.build}: 200 ${r.real.answered200} / 429 ${r.real.limited429} / p99 ${r.real.p99} ms / fail-open ${r.failOpen} / local ${r.localFallback}`,
          )
          .join("; ")}`
      : "flood: not run",
    `memory (max RSS MB): ${Object.entries(report.memoryMb)
      .map(([k, m]) => `${k} ${m.max} (first ${m.first}, last ${m.last})`)
      .join(", ")}`,
    `results: ${file} (${report.durationS} s)`,
    "",
  );
  process.stdout.write(lines.join("\n"));
}
