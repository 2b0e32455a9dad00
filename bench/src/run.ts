/**
 * `pnpm bench`: starts the stack (src/stack.ts) and runs each scenario of src/scenarios/ against
 * it, every one against floors built from the same components in the same run (src/floor.ts, and
 * src/sender-floor.ts for the dispatcher): the hot paths, vote → webhook, `webhook-mix` (what a
 * delivered vote costs), `hostile` and `flood` (a real token's answers while the API is flooded). Prints the tables and writes
 * bench/results/runs/<timestamp>.json, then the day's median file (src/summary.ts).
 *
 * BENCH_ONLY="check,stats" runs the hot paths whose name contains one of the words, and the
 * scenarios named (webhook, mix, hostile, flood); `tracing` runs the rows "(tracing on ÷ off)" and
 * "(tracing 0.1 ÷ off)" and the dispatcher's drain with tracing off, on and at 0.1 side by side.
 */
import { cpus } from "node:os";
import path from "node:path";
import { appNodeVersion, ROOT } from "./procs.js";
import { headlineOf, printReport } from "./report.js";
import { drain } from "./scenarios/drain.js";
import { flood } from "./scenarios/flood.js";
import { hostile } from "./scenarios/hostile.js";
import { webhookMix } from "./scenarios/mix.js";
import { hotPaths } from "./scenarios/paths.js";
import { webhook } from "./scenarios/webhook.js";
import { startStack } from "./stack.js";
import { saveRun } from "./summary.js";

const settings = {
  roundS: Number(process.env.BENCH_ROUND_S ?? 5),
  rounds: Number(process.env.BENCH_ROUNDS ?? 3),
  connections: Number(process.env.BENCH_CONNECTIONS ?? 32),
  only: process.env.BENCH_ONLY?.split(",").map((w) => w.trim().toLowerCase()),
};
const selected = (...names: string[]) => !settings.only || settings.only.some((w) => names.includes(w));

async function main(): Promise<void> {
  const startedAt = Date.now();
  const stack = await startStack();
  try {
    const paths = await hotPaths(stack, settings);
    const webhookResult = selected("webhook") ? await webhook(stack, settings) : null;
    const mix = selected("mix", "webhook-mix")
      ? await webhookMix(stack, settings, stack.seeded.mixBots)
      : null;
    const hostileResult = selected("hostile")
      ? await hostile(stack, settings, stack.seeded.hostileBots, stack.seeded.hostileHealthy, {
          seconds: 10,
          drainVotes: Number(process.env.BENCH_HOSTILE_DRAIN_VOTES ?? 5_000),
        })
      : null;
    const floodResult = selected("flood")
      ? await flood(stack, {
          rounds: Number(process.env.BENCH_FLOOD_ROUNDS ?? 3),
          seconds: Number(process.env.BENCH_FLOOD_S ?? 10),
        })
      : null;
    // Only when asked for by name: builds of the dispatcher compared on a full queue.
    const drainResult = settings.only?.includes("drain")
      ? await drain(stack, settings, {
          builds: process.env.BENCH_DRAIN_BUILDS?.split(",").filter(Boolean) ?? [undefined],
          rounds: Number(process.env.BENCH_DRAIN_ROUNDS ?? 3),
          votes: Number(process.env.BENCH_DRAIN_VOTES ?? 5_000),
          together: process.env.BENCH_DRAIN_TOGETHER === "1",
        })
      : null;
    // Tracing on ÷ off for the dispatcher: its build with tracing off, on (always_on) and at 0.1
    // (parentbased_traceidratio) drain each round's queue side by side; the votes are cast through
    // the vote-ingest at 0.1, so a tenth of the jobs carry a sampled parent, as in production.
    const tracingDrain = selected("tracing")
      ? await drain(stack, settings, {
          builds: [undefined, "?tracing=on", "?tracing=0.1"],
          rounds: Number(process.env.BENCH_TRACING_DRAIN_ROUNDS ?? 3),
          votes: Number(process.env.BENCH_DRAIN_VOTES ?? 5_000),
          together: true,
          castVia: stack.sampled.ingestUrl,
        })
      : null;
    await stack.stopDispatchers();

    const report = {
      date: new Date().toISOString(),
      machine: { cores: cpus().length, node: process.version, appNode: appNodeVersion() },
      settings: {
        roundSeconds: settings.roundS,
        rounds: settings.rounds,
        connections: settings.connections,
        logLevel: stack.env.LOG_LEVEL,
        nodeArgs: stack.nodeArgs,
      },
      headline: headlineOf(paths, mix),
      ...paths,
      webhook: webhookResult ?? {
        throughput: {},
        latencyAt500PerSecond: { p50: Number.NaN, p99: Number.NaN, samples: 0 },
      },
      webhookMix: mix,
      hostile: hostileResult,
      ...(drainResult ? { drain: drainResult } : {}),
      ...(floodResult ? { flood: floodResult } : {}),
      ...(tracingDrain ? { tracingDrain } : {}),
      memoryMb: stack.memory(),
      durationS: Math.round((Date.now() - startedAt) / 1000),
    };
    // A full run joins the day's median file; a subset or shortened run is kept apart.
    const full =
      !settings.only && settings.roundS === 5 && settings.rounds === 3 && process.env.BENCH_NO_FLOOR !== "1";
    const file = saveRun(path.join(ROOT, "bench/results"), report, { full });
    printReport(report, path.relative(ROOT, file));
  } finally {
    await stack.stop();
  }
}

try {
  await main();
} catch (error) {
  process.stderr.write(`[bench] failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
}
