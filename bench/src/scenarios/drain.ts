/**
 * `drain` (only with BENCH_ONLY=drain): what one delivery costs the dispatcher, PostgreSQL and
 * Redis with nothing else running, for comparing builds of the dispatcher in one run. The queue is
 * filled with `votes` votes of the webhook-mix bots while no dispatcher runs, then one dispatcher
 * drains it; its counters are read at its first delivery (after its start-up) and when every vote
 * has arrived. BENCH_DRAIN_BUILDS (comma-separated dispatcher entries, e.g. bundles of two commits
 * copied out of apps/webhook-dispatcher/dist/, each optionally followed by `?NAME=value&…`: its
 * environment; `?NAME=value` alone is the run's own build with that environment; `?tracing=on`: every
 * span sampled and exported to the run's OTLP receiver) are taken in
 * turn, round after round (A B A B …), so the machine's load falls on each alike; by default the
 * run's own build.
 */
import { load } from "../load.js";
import { MIX_PATH, median, sleep } from "../pipeline.js";
import { cpuSeconds, cpuSecondsBetween, postgresCpu, redisCommandCalls } from "../procs.js";
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
}

export interface DrainResult {
  rounds: DrainRound[];
  /** Median of each build's rounds. */
  byBuild: Record<string, Omit<DrainRound, "build">>;
}

export async function drain(
  stack: Stack,
  settings: { connections: number },
  options: { builds: (string | undefined)[]; rounds: number; votes: number },
): Promise<DrainResult> {
  const rounds: DrainRound[] = [];
  let user = 9200000000000000000n;
  const bots = stack.seeded.mixBots;
  for (let round = 0; round < options.rounds; round++) {
    for (const build of options.builds) {
      await stack.stopDispatchers();
      const from = stack.receiver.received(MIX_PATH);
      let voter = 0;
      const first = user;
      await load({
        url: stack.ingestUrl,
        method: "POST",
        durationS: 120,
        connections: settings.connections,
        amount: options.votes,
        request: () => ({
          path: "/internal/v1/votes",
          headers: { authorization: stack.internalKey },
          body: `{"bot_id":"${bots[voter % bots.length]}","user_id":"${first + BigInt(voter++)}"}`,
        }),
      });
      user += BigInt(options.votes);
      const [entry, query] = (build ?? "").split("?") as [string, string | undefined];
      // `?tracing=on`: the run's OTLP receiver and every span sampled (stack.tracingEnv).
      const params = Object.fromEntries(new URLSearchParams(query ?? ""));
      const { tracing, ...own } = params;
      const env = tracing === "on" ? { ...stack.tracingEnv, ...own } : own;
      const pid = (await stack.startDispatchers(1, entry || undefined, env))[0]?.child.pid;
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
  const byBuild: DrainResult["byBuild"] = {};
  for (const build of new Set(rounds.map((r) => r.build))) {
    const of = rounds.filter((r) => r.build === build);
    const m = (k: keyof Omit<DrainRound, "build">) => median(of.map((r) => r[k]));
    byBuild[build] = {
      delivered: m("delivered"),
      perSecond: m("perSecond"),
      dispatcher: m("dispatcher"),
      postgres: m("postgres"),
      redis: m("redis"),
      redisCommands: m("redisCommands"),
      evalsha: m("evalsha"),
    };
    log(`drain, ${build}: medians ${JSON.stringify(byBuild[build])}`);
  }
  return { rounds, byBuild };
}
