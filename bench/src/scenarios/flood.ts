/**
 * `flood`: a real token keeps its answers and its exact limit while the API is flooded. For
 * `seconds` (default 10), at once, on the run's API:
 * - unknown tokens on `GET /check`, 200 connections (a pool of 10,000 random tokens);
 * - badges of ids no process holds, 200 connections (a new id each request);
 * - one real token on `GET /check`, 32 connections (its limit 600 a minute, a window of its own:
 *   each round takes a bot that only `POST /stats` uses elsewhere).
 * Per round: the real token's 200s (goal ≥ 90 % of 600, never > 600), 429s, other statuses and
 * errors, p99, and what the API's /metrics counted meanwhile: limiter fail-open and local-fallback
 * decisions and shed requests; the floods' statuses. With BENCH_BASE_APPS (stack.ts `base`), each
 * round runs on this build's API and on the base's in turn (the first to go alternating), so the
 * two are measured through the same stretch of the host's load.
 */
import { randomBytes } from "node:crypto";
import { type LoadResult, load } from "../load.js";
import { metricSums } from "../procs.js";
import { botId, log, type Stack, userId } from "../stack.js";

export const FLOOD_LIMIT = 600;

export interface FloodRound {
  /** "this build", or "base" (BENCH_BASE_APPS). */
  build: string;
  real: {
    answered200: number;
    limited429: number;
    statuses: Record<string, number>;
    errors: number;
    p99: number;
    total: number;
  };
  failOpen: number;
  localFallback: number;
  shed: number;
  unknownTokens: { rps: number; statuses: Record<string, number>; errors: number };
  widgets: { rps: number; statuses: Record<string, number>; errors: number };
}

export interface FloodResult {
  seconds: number;
  connections: { real: number; unknownTokens: number; widgets: number };
  rounds: FloodRound[];
}

const COUNTERS = [
  "botdir_rate_limit_fail_open_total",
  "botdir_rate_limit_local_fallback_total",
  "botdir_flood_shed_total",
] as const;

const statusText = (statuses: Record<string, number>) =>
  Object.entries(statuses)
    .map(([status, n]) => `${status}: ${n}`)
    .join(", ");

export async function flood(
  stack: Stack,
  options: { rounds: number; seconds: number; connections?: { real: number; flood: number } },
): Promise<FloodResult> {
  const connections = options.connections ?? { real: 32, flood: 200 };
  const randomTokens = Array.from({ length: 10_000 }, () => randomBytes(32).toString("base64url"));
  let unknown = 0;
  let widget = 0;
  const rounds: FloodRound[] = [];
  const { statsBots } = stack.seeded;
  const builds = [
    { build: "this build", apiUrl: stack.apiUrl, metricsUrl: stack.apiMetricsUrl },
    ...(stack.base
      ? [{ build: "base", apiUrl: stack.base.apiUrl, metricsUrl: stack.base.apiMetricsUrl }]
      : []),
  ];
  const turns = Array.from({ length: options.rounds }, (_, round) =>
    round % 2 === 0 ? builds : [...builds].reverse(),
  ).flat();
  for (const [round, target] of turns.entries()) {
    // The last bots of /stats's rotation: their /check windows are untouched by every other row.
    const bot = statsBots[statsBots.length - 1 - round] as { id: string; token: string };
    const before = await metricSums(target.metricsUrl, COUNTERS);
    const run = (connectionsOf: number, request: () => { path: string; headers?: Record<string, string> }) =>
      load({ url: target.apiUrl, durationS: options.seconds, connections: connectionsOf, request });
    const [real, unknownTokens, widgets] = await Promise.all([
      run(connections.real, () => ({
        path: `/api/v1/bots/${bot.id}/check?userId=${userId(1)}`,
        headers: { authorization: bot.token },
      })),
      run(connections.flood, () => ({
        path: `/api/v1/bots/${botId(1 + (unknown % 1000))}/check?userId=${userId(1)}`,
        headers: { authorization: randomTokens[unknown++ % randomTokens.length] as string },
      })),
      run(connections.flood, () => ({ path: `/widget/${700000000000000000n + BigInt(widget++)}.svg` })),
    ]);
    const after = await metricSums(target.metricsUrl, COUNTERS);
    const delta = (i: number) => (after[i] ?? 0) - (before[i] ?? 0);
    const statuses = (r: LoadResult) => r.statuses ?? {};
    const result: FloodRound = {
      build: target.build,
      real: {
        answered200: statuses(real)["200"] ?? 0,
        limited429: statuses(real)["429"] ?? 0,
        statuses: statuses(real),
        errors: real.errors,
        p99: real.p99,
        total: real.total,
      },
      failOpen: delta(0),
      localFallback: delta(1),
      shed: delta(2),
      unknownTokens: {
        rps: unknownTokens.rps,
        statuses: statuses(unknownTokens),
        errors: unknownTokens.errors,
      },
      widgets: { rps: widgets.rps, statuses: statuses(widgets), errors: widgets.errors },
    };
    rounds.push(result);
    const r = result.real;
    log(
      `flood round ${round + 1} (${target.build}): real token 200 ${r.answered200} of ${FLOOD_LIMIT}, 429 ${r.limited429}, ` +
        `statuses {${statusText(r.statuses)}}, errors/timeouts ${r.errors}, p99 ${r.p99} ms; ` +
        `limiter fail-open ${result.failOpen}, local fallback ${result.localFallback}, shed ${result.shed}; ` +
        `unknown tokens ${unknownTokens.rps}/s {${statusText(result.unknownTokens.statuses)}} errors ${unknownTokens.errors}; ` +
        `widgets ${widgets.rps}/s {${statusText(result.widgets.statuses)}} errors ${widgets.errors}`,
    );
    // The floods' connections and answers settle before the next round.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
  }
  return {
    seconds: options.seconds,
    connections: { real: connections.real, unknownTokens: connections.flood, widgets: connections.flood },
    rounds,
  };
}
