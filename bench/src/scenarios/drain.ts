/**
 * `drain` (only with BENCH_ONLY=drain): what one delivery costs the dispatcher, PostgreSQL and
 * Redis with nothing else running, for comparing builds of the dispatcher in one run. The queue is
 * filled with `votes` votes of the webhook-mix bots while no dispatcher runs, then one dispatcher
 * drains it; its counters are read at its first delivery (after its start-up) and when every vote
 * has arrived. BENCH_DRAIN_BUILDS (comma-separated dispatcher entries, e.g. bundles of two commits
 * copied out of apps/webhook-dispatcher/dist/, each optionally followed by `?NAME=value&…`: its
 * environment; `?NAME=value` alone is the run's own build with that environment; `?tracing=on`: every
 * span sampled and exported to an OTLP receiver of its own; `?tracing=0.1`: the same at
 * parentbased_traceidratio 0.1) are taken in
 * turn, round after round (A B A B …), so the machine's load falls on each alike; by default the
 * run's own build.
 *
 * BENCH_DRAIN_TOGETHER=1 with two or three builds: they drain each round's queue at once, side by
 * side, so whatever else loads the machine falls on all of them in the same seconds (a shared
 * machine's load moves CPU µs per delivery by ±5–10 % from one round to the next, more than the
 * differences between builds). Each build's CPU per delivery is its process's CPU over the
 * deliveries its own metrics count (botdir_webhook_attempts_total), from the moment all have made
 * an attempt to the queue's end; the order they start in rotates by round. `ratios`: each other
 * build's ÷ the first build's, per round.
 */
import { load } from "../load.js";
import { startOtlpSink } from "../otlp-sink.js";
import { MIX_PATH, median, sleep } from "../pipeline.js";
import { cpuSeconds, cpuSecondsBetween, metricSums, postgresCpu, redisCommandCalls } from "../procs.js";
import { log, type Stack } from "../stack.js";

export interface DrainRound {
  build: string;
  delivered: number;
  perSecond: number;
  /** CPU µs per delivery. */
  dispatcher: number;
  postgres: number;
  redis: number;
  /** Redis commands per delivery (INFO commandstats; EVALSHA counts the scripts). */
  redisCommands: number;
  evalsha: number;
  /** A build that exports spans, side by side: the bytes its OTLP exports carried per delivery. */
  exportedBytes?: number;
}

export interface DrainResult {
  rounds: DrainRound[];
  /** Side by side (BENCH_DRAIN_TOGETHER): each other build's CPU µs per delivery ÷ the first's, per round. */
  ratios?: Record<string, { perRound: number[]; median: number }>;
  /** Median of each build's rounds. */
  byBuild: Record<string, Omit<DrainRound, "build">>;
}

export async function drain(
  stack: Stack,
  settings: { connections: number },
  options: {
    builds: (string | undefined)[];
    rounds: number;
    votes: number;
    together?: boolean;
    /** The vote-ingest the queue is filled through (default the run's, tracing off). */
    castVia?: string;
  },
): Promise<DrainResult> {
  if (options.together) return drainTogether(stack, settings, options);
  const rounds: DrainRound[] = [];
  const fill = filler(stack, settings, options.votes, options.castVia);
  for (let round = 0; round < options.rounds; round++) {
    for (const build of options.builds) {
      await stack.stopDispatchers();
      const from = stack.receiver.received(MIX_PATH);
      await fill();
      const { entry, env } = buildOf(stack, build);
      const pid = (await stack.startDispatchers(1, entry, env))[0]?.child.pid;
      const deadline = Date.now() + 120_000;
      while (stack.receiver.received(MIX_PATH) === from && Date.now() < deadline) await sleep(5);
      const read = async () => ({
        at: Date.now(),
        received: stack.receiver.received(MIX_PATH),
        dispatcher: cpuSeconds(pid),
        redis: cpuSeconds(stack.redisPid()),
        postgres: postgresCpu(stack.dbName),
        calls: await redisCommandCalls(stack.redisUrl),
      });
      const before = await read();
      while (stack.receiver.received(MIX_PATH) < from + options.votes && Date.now() < deadline)
        await sleep(20);
      const after = await read();
      const n = Math.max(1, after.received - before.received);
      const us = (seconds: number) => Math.round((seconds * 1e6) / n);
      const calls = (name?: string) =>
        Object.entries(after.calls)
          .filter(([c]) => (name ? c === name : c !== "info"))
          .reduce((a, [c, v]) => a + v - (before.calls[c] ?? 0), 0);
      const r: DrainRound = {
        build: build ?? "this build",
        delivered: after.received - from,
        perSecond: Math.round((n * 1000) / Math.max(1, after.at - before.at)),
        dispatcher: us(after.dispatcher - before.dispatcher),
        postgres: us(cpuSecondsBetween(before.postgres, after.postgres)),
        redis: us(after.redis - before.redis),
        redisCommands: Math.round((calls() / n) * 100) / 100,
        evalsha: Math.round((calls("evalsha") / n) * 100) / 100,
      };
      rounds.push(r);
      log(
        `drain, ${r.build}: ${r.delivered}/${options.votes} delivered, ${r.perSecond}/s; CPU µs per delivery: dispatcher ${r.dispatcher}, ` +
          `postgres ${r.postgres}, redis ${r.redis}; Redis commands per delivery ${r.redisCommands} (evalsha ${r.evalsha})`,
      );
    }
  }
  await stack.stopDispatchers();
  return { rounds, byBuild: mediansByBuild(rounds) };
}

/** Casts `votes` votes of the webhook-mix bots (new users each call) while no dispatcher runs. */
function filler(
  stack: Stack,
  settings: { connections: number },
  votes: number,
  castVia = stack.ingestUrl,
): () => Promise<void> {
  let user = 9200000000000000000n;
  const bots = stack.seeded.mixBots;
  return async () => {
    let voter = 0;
    const first = user;
    await load({
      url: castVia,
      method: "POST",
      durationS: 120,
      connections: settings.connections,
      amount: votes,
      request: () => ({
        path: "/internal/v1/votes",
        headers: { authorization: stack.internalKey },
        body: `{"bot_id":"${bots[voter % bots.length]}","user_id":"${first + BigInt(voter++)}"}`,
      }),
    });
    user += BigInt(votes);
  };
}

/** A BENCH_DRAIN_BUILDS entry: its dispatcher entry (the run's own when empty) and environment. */
function buildOf(stack: Stack, build: string | undefined): { entry?: string; env: Record<string, string> } {
  const [entry, query] = (build ?? "").split("?") as [string, string | undefined];
  // `?tracing=on`: the run's OTLP receiver and every span sampled (stack.tracingEnv); `?tracing=0.1`:
  // a tenth of new traces, parent-based (stack.sampledTracingEnv).
  const { tracing, ...own } = Object.fromEntries(new URLSearchParams(query ?? ""));
  const tracingEnv =
    tracing === "on" ? stack.tracingEnv : tracing === "0.1" ? stack.sampledTracingEnv : undefined;
  const env = tracingEnv ? { ...tracingEnv, ...own } : own;
  return entry ? { entry, env } : { env };
}

/** The attempts a dispatcher has made (botdir_webhook_attempts_total, every label), from its metrics. */
async function attemptsOf(metricsUrl: string): Promise<number> {
  return (await metricSums(metricsUrl, ["botdir_webhook_attempts_total"]))[0] ?? 0;
}

/** BENCH_DRAIN_TOGETHER: the two builds drain each round's queue side by side (see the file's comment). */
async function drainTogether(
  stack: Stack,
  settings: { connections: number },
  options: { builds: (string | undefined)[]; rounds: number; votes: number; castVia?: string },
): Promise<DrainResult> {
  if (options.builds.length < 2 || options.builds.length > 3) {
    throw new Error("BENCH_DRAIN_TOGETHER compares two or three builds");
  }
  const rounds: DrainRound[] = [];
  const perRound: number[][] = options.builds.slice(1).map(() => []);
  const fill = filler(stack, settings, options.votes, options.castVia);
  // Each build that exports spans gets an OTLP receiver of its own: its bytes per delivery.
  const sinks = await Promise.all(
    options.builds.map((b) =>
      buildOf(stack, b).env.OTEL_EXPORTER_OTLP_ENDPOINT ? startOtlpSink() : undefined,
    ),
  );
  const withSink = (b: string | undefined, i: number) => {
    const built = buildOf(stack, b);
    const sink = sinks[i];
    return sink ? { ...built, env: { ...built.env, OTEL_EXPORTER_OTLP_ENDPOINT: sink.url } } : built;
  };
  for (let round = 0; round < options.rounds; round++) {
    await stack.stopDispatchers();
    const from = stack.receiver.received(MIX_PATH);
    await fill();
    // The order they start in (the first is profiled) rotates by round.
    const order = options.builds.map((_, i) => (i + round) % options.builds.length);
    const builds = order.map((i) => options.builds[i]);
    const procs = await stack.startDispatcherBuilds(order.map((i) => withSink(options.builds[i], i)));
    const urls = stack.dispatcherMetricsUrls;
    const deadline = Date.now() + 120_000;
    // The window opens when both have made an attempt (both past their start-up), for both at once.
    await Promise.all(
      urls.slice(0, procs.length).map(async (url) => {
        while ((await attemptsOf(url)) === 0 && Date.now() < deadline) await sleep(10);
      }),
    );
    const read = () =>
      Promise.all(
        procs.map(async (proc, i) => ({
          attempts: await attemptsOf(urls[i] as string),
          cpu: cpuSeconds(proc.child.pid),
          exported: sinks[order[i] as number]?.received().bytes ?? 0,
        })),
      );
    const opened = await read();
    const shared = async () => ({
      at: Date.now(),
      redis: cpuSeconds(stack.redisPid()),
      postgres: postgresCpu(stack.dbName),
    });
    const sharedBefore = await shared();
    const receivedBefore = stack.receiver.received(MIX_PATH);
    while (stack.receiver.received(MIX_PATH) < from + options.votes && Date.now() < deadline) await sleep(20);
    const closed = await read();
    const sharedAfter = await shared();
    const n = Math.max(1, stack.receiver.received(MIX_PATH) - receivedBefore);
    const us = (seconds: number, count: number) => Math.round((seconds * 1e6) / Math.max(1, count));
    const byIndex: DrainRound[] = [];
    for (const [i, build] of builds.entries()) {
      const made = (closed[i]?.attempts ?? 0) - (opened[i]?.attempts ?? 0);
      const r: DrainRound = {
        build: build ?? "this build",
        delivered: closed[i]?.attempts ?? 0,
        perSecond: Math.round((made * 1000) / Math.max(1, sharedAfter.at - sharedBefore.at)),
        dispatcher: us((closed[i]?.cpu ?? 0) - (opened[i]?.cpu ?? 0), made),
        postgres: us(cpuSecondsBetween(sharedBefore.postgres, sharedAfter.postgres), n),
        redis: us(sharedAfter.redis - sharedBefore.redis, n),
        redisCommands: 0,
        evalsha: 0,
        ...(sinks[order[i] as number]
          ? {
              exportedBytes: Math.round(
                ((closed[i]?.exported ?? 0) - (opened[i]?.exported ?? 0)) / Math.max(1, made),
              ),
            }
          : {}),
      };
      byIndex[order[i] as number] = r;
      log(
        `drain together, round ${round + 1}, ${r.build}: ${made} attempts in its window, ${r.perSecond}/s; ` +
          `CPU µs per delivery: dispatcher ${r.dispatcher} (both: postgres ${r.postgres}, redis ${r.redis})` +
          (r.exportedBytes === undefined ? "" : `; ${r.exportedBytes} bytes exported per delivery`),
      );
    }
    rounds.push(...byIndex);
    const [a, ...others] = byIndex;
    for (const [i, b] of others.entries()) {
      if (!a || !b || a.dispatcher <= 0) continue;
      perRound[i]?.push(Math.round((b.dispatcher / a.dispatcher) * 1000) / 1000);
      log(`drain together, round ${round + 1}: ${b.build} ÷ ${a.build} = ${perRound[i]?.at(-1)}`);
    }
  }
  await stack.stopDispatchers();
  await Promise.all(sinks.map((sink) => sink?.close()));
  const ratios: NonNullable<DrainResult["ratios"]> = {};
  for (const [i, build] of options.builds.slice(1).entries()) {
    const of = perRound[i] ?? [];
    const name = `${build ?? "this build"} ÷ ${options.builds[0] ?? "this build"}`;
    ratios[name] = { perRound: of, median: median(of) };
    log(`drain together: ${name}, median ${median(of)} of ${of.join(", ")}`);
  }
  return { rounds, byBuild: mediansByBuild(rounds), ratios };
}

function mediansByBuild(rounds: DrainRound[]): DrainResult["byBuild"] {
  const byBuild: DrainResult["byBuild"] = {};
  for (const build of new Set(rounds.map((r) => r.build))) {
    const of = rounds.filter((r) => r.build === build);
    const m = (k: keyof Omit<DrainRound, "build" | "exportedBytes">) => median(of.map((r) => r[k]));
    const exported = of.flatMap((r) => (r.exportedBytes === undefined ? [] : [r.exportedBytes]));
    byBuild[build] = {
      delivered: m("delivered"),
      perSecond: m("perSecond"),
      dispatcher: m("dispatcher"),
      postgres: m("postgres"),
      redis: m("redis"),
      redisCommands: m("redisCommands"),
      evalsha: m("evalsha"),
      ...(exported.length > 0 ? { exportedBytes: median(exported) } : {}),
    };
    log(`drain, ${build}: medians ${JSON.stringify(byBuild[build])}`);
  }
  return byBuild;
}
