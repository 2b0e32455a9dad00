/**
 * `webhook-mix`: what a delivered vote costs. Every voted bot has a webhook; votes are cast at full
 * speed (32 connections) in rounds alternating with the floor's vote route, twice:
 *
 * 1. with one dispatcher delivering every vote while they are cast. After each round the bench
 *    waits until that round's votes have all arrived at the receiver before it reads the CPU
 *    counters, so each process's CPU is divided by votes recorded *and delivered*;
 * 2. the same rounds (other users, same bots) with no dispatcher running: each vote is still written
 *    with its delivery and handed to the queue, so this is recording alone. One dispatcher then
 *    drains them (its CPU per delivery counted from its first delivery on), so the next scenario
 *    starts with an empty queue; the dispatcher's floors (src/sender-floor.ts, with got and with
 *    Node's client) send as many deliveries, half just before that drain and half just after it.
 *
 * The headline is the **pipeline ratio**, the ingest's votes/s in (1) ÷ in (2): how much of the
 * ingest's own rate survives delivering every vote on the same cores. The per-vote table
 * (`perDeliveredVote`) has CPU µs per vote of every process in (1) and (2), what delivery adds
 * (1 − 2), the delivery side (dispatcher + what delivery adds in PostgreSQL and Redis), Redis
 * commands per vote (`INFO commandstats`), PostgreSQL transactions per vote
 * (`pg_stat_database`) and the dispatcher ÷ its floor.
 *
 * The sender floor's requests that were not delivered (the floor's client, not our code) are a
 * figure of the result (`ingestAlone.senderFloorLost`), printed with it, not a reason to abort.
 */
import { type LoadResult, load } from "../load.js";
import { MIX_PATH, median, percentile, SENDER_FLOOR_PATH, sleep } from "../pipeline.js";
import {
  type CpuByPid,
  cpuSeconds,
  cpuSecondsBetween,
  gcSeconds,
  postgresCpu,
  redisCommandCalls,
} from "../procs.js";
import { log, type Stack } from "../stack.js";

type Build = () => { path: string; headers?: Record<string, string>; body?: string };

/** CPU µs per vote of each process (the load generator's includes the receiver: same process). */
export interface Cpu {
  ingest: number;
  dispatcher: number;
  postgres: number;
  redis: number;
  loadGenerator: number;
}

/** Redis commands per vote: every command's calls, and their sum. */
export interface RedisPerVote {
  total: number;
  byCommand: Record<string, number>;
}

export interface PerDeliveredVote {
  /** Mix ingest votes/s ÷ the same rounds' with no dispatcher (the headline). */
  pipelineRatio: number;
  noDispatcher: Cpu;
  withDispatcher: Cpu;
  /** withDispatcher − noDispatcher, per process. */
  deliveryAdds: Cpu;
  /** The dispatcher + what delivery adds in PostgreSQL and Redis (µs per delivered vote). */
  deliverySide: number;
  redisCommands: { noDispatcher: RedisPerVote; withDispatcher: RedisPerVote; deliveryAdds: RedisPerVote };
  /** PostgreSQL transactions (committed + rolled back) of the scratch database per vote. */
  postgresTransactions: { noDispatcher: number; withDispatcher: number; deliveryAdds: number };
}

export interface WebhookMixResult {
  /** The headline: ingest votes/s with the dispatcher ÷ the same rounds with none (same run). */
  pipelineRatio: number;
  perDeliveredVote: PerDeliveredVote;
  floor: { rps: number; p50: number; p99: number };
  ours: { rps: number; p50: number; p99: number; non2xx: number };
  /** Ours ÷ the floor's vote route (the runtime's speed shows in it more than the pipeline's). */
  ratio: number;
  /** Ratio of each round (ours / the floor round just before it). */
  roundRatios: number[];
  /** Deliveries received per second during our rounds (votes being cast at full speed). */
  deliveriesPerSecondWhileCasting: number;
  recorded: number;
  delivered: number;
  /** Seconds after the last round until every recorded vote was delivered. */
  drainAfterS: number;
  /** vote → receipt while casting at full speed. */
  latencyMs: { p50: number; p99: number };
  cpuMicrosecondsPerVote: Cpu;
  /** Of that CPU, microseconds per vote spent in garbage collection (null: not readable). */
  gcMicrosecondsPerVote: { ingest: number | null; dispatcher: number | null };
  /** The same votes cast while no dispatcher runs: recording alone. */
  ingestAlone: IngestAloneResult;
}

export interface IngestAloneResult {
  floor: { rps: number };
  ours: { rps: number; non2xx: number };
  ratio: number;
  roundRatios: number[];
  /** The dispatcher column is 0: none runs. */
  cpuMicrosecondsPerVote: Cpu;
  /** Delivered afterwards by one dispatcher, so the next scenario starts with an empty queue. */
  recorded: number;
  delivered: number;
  /**
   * That drain's CPU µs per delivery (from the first delivery on, so without the dispatcher's
   * start-up): the delivery side with no votes being cast beside it.
   */
  drainCpuMicrosecondsPerDelivery: { dispatcher: number; postgres: number; redis: number };
  /**
   * The dispatcher's floor (src/sender-floor.ts: the same signed requests through the dispatcher's
   * got client, to the same receiver, at the same concurrency, with its log line; nothing else):
   * CPU µs per delivery, half of the drain's count sent just before the drain and half just after;
   * `node`: the same with Node's http.request instead of got.
   */
  senderFloorCpuMicrosecondsPerDelivery: { got: number; node: number };
  /** Requests each sender floor sent in its two measured rounds (the same for both clients). */
  senderFloorSent: number;
  /** Of those, the requests each floor did not deliver (its client's loss, not the dispatcher's). */
  senderFloorLost: { got: number; node: number };
  /** The drain's dispatcher CPU per delivery ÷ the sender floor's (same run, same deliveries). */
  dispatcherVsSenderFloor: number;
}

interface Settings {
  roundS: number;
  rounds: number;
  connections: number;
}

/** Counters read around a round: CPU seconds, Redis calls, PostgreSQL transactions. */
interface Reading {
  /** CPU seconds so far; PostgreSQL's by backend. */
  cpu: Omit<Cpu, "postgres">;
  postgres: CpuByPid;
  redis: Record<string, number>;
  transactions: number;
}

async function read(stack: Stack, dispatcherPid: number | undefined): Promise<Reading> {
  const [redis, tx] = await Promise.all([
    redisCommandCalls(stack.redisUrl),
    stack.db.query(
      "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()",
    ),
  ]);
  return {
    cpu: {
      ingest: cpuSeconds(stack.ingestPid()),
      dispatcher: cpuSeconds(dispatcherPid),
      redis: cpuSeconds(stack.redisPid()),
      loadGenerator: cpuSeconds(process.pid),
    },
    postgres: postgresCpu(stack.dbName),
    redis,
    transactions: Number(tx.rows[0].n),
  };
}

const cpuKeys = ["ingest", "dispatcher", "postgres", "redis", "loadGenerator"] as const;
const cpuOf = (f: (k: keyof Cpu) => number): Cpu =>
  Object.fromEntries(cpuKeys.map((k) => [k, f(k)])) as unknown as Cpu;

/** CPU µs per vote of each process between two readings. */
const cpuPerVote = (before: Reading, after: Reading, votes: number): Cpu =>
  cpuOf((k) => {
    const seconds =
      k === "postgres" ? cpuSecondsBetween(before.postgres, after.postgres) : after.cpu[k] - before.cpu[k];
    return Math.round((seconds * 1e6) / Math.max(1, votes));
  });

/** Redis calls per vote of each command between two readings (the bench's own INFO left out). */
function redisPerVote(before: Reading, after: Reading, votes: number): RedisPerVote {
  const byCommand: Record<string, number> = {};
  let total = 0;
  for (const [command, calls] of Object.entries(after.redis)) {
    const n = calls - (before.redis[command] ?? 0) - (command === "info" ? 1 : 0);
    if (n <= 0) continue;
    byCommand[command] = n / Math.max(1, votes);
    total += n;
  }
  return { total: total / Math.max(1, votes), byCommand };
}

const round2 = (x: number) => Math.round(x * 100) / 100;

function meanRedis(xs: RedisPerVote[]): RedisPerVote {
  const commands = [...new Set(xs.flatMap((x) => Object.keys(x.byCommand)))];
  const byCommand = Object.fromEntries(
    commands
      .map(
        (c) =>
          [c, round2(xs.reduce((a, x) => a + (x.byCommand[c] ?? 0), 0) / Math.max(1, xs.length))] as const,
      )
      .filter(([, n]) => n >= 0.01)
      .sort((a, b) => b[1] - a[1]),
  );
  return { total: round2(xs.reduce((a, x) => a + x.total, 0) / Math.max(1, xs.length)), byCommand };
}

function redisDifference(a: RedisPerVote, b: RedisPerVote): RedisPerVote {
  const commands = [...new Set([...Object.keys(a.byCommand), ...Object.keys(b.byCommand)])];
  const byCommand = Object.fromEntries(
    commands
      .map((c) => [c, round2((a.byCommand[c] ?? 0) - (b.byCommand[c] ?? 0))] as const)
      .filter(([, n]) => Math.abs(n) >= 0.01)
      .sort((x, y) => y[1] - x[1]),
  );
  return { total: round2(a.total - b.total), byCommand };
}

interface Round {
  floor: LoadResult;
  ours: LoadResult;
  /** Votes the round's counters are divided by (recorded, and delivered when a dispatcher runs). */
  votes: number;
  cpu: Cpu;
  redis: RedisPerVote;
  transactions: number;
}

/**
 * Rounds of the floor's vote route and ours, alternating (the floor first). `settle` runs after
 * each of our rounds, before the counters are read again (waiting for the round's deliveries), and
 * returns the number of votes to divide by.
 */
async function alternate(
  stack: Stack,
  settings: Settings,
  build: Build,
  dispatcherPid: number | undefined,
  hooks: {
    before?: () => Promise<void>;
    settle: (round: { from: number; to: number; recorded: number }) => Promise<number>;
  },
): Promise<Round[]> {
  const run = (url: string) =>
    load({
      url,
      method: "POST",
      durationS: settings.roundS,
      connections: settings.connections,
      request: build,
    });
  const rounds: Round[] = [];
  for (let i = 0; i < settings.rounds; i++) {
    const floor = await run(stack.floorUrl);
    await hooks.before?.();
    const before = await read(stack, dispatcherPid);
    const from = Date.now();
    const ours = await run(stack.ingestUrl);
    const to = Date.now();
    const votes = await hooks.settle({ from, to, recorded: ours.total - ours.non2xx });
    const after = await read(stack, dispatcherPid);
    rounds.push({
      floor,
      ours,
      votes,
      cpu: cpuPerVote(before, after, votes),
      redis: redisPerVote(before, after, votes),
      transactions: (after.transactions - before.transactions) / Math.max(1, votes),
    });
  }
  return rounds;
}

const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);
const meanCpu = (rounds: Round[]): Cpu => cpuOf((k) => Math.round(mean(rounds.map((r) => r.cpu[k]))));
/** Ours ÷ the floor, mean req/s over the rounds, to two decimals. */
const ratioOf = (rounds: Round[]) =>
  round2(mean(rounds.map((r) => r.ours.rps)) / Math.max(1, mean(rounds.map((r) => r.floor.rps))));
const roundRatiosOf = (rounds: Round[]) => rounds.map((r) => round2(r.ours.rps / Math.max(1, r.floor.rps)));

/** POST /internal/v1/votes over `bots` round-robin, each vote by a new user from `firstUser` on. */
function votesOf(stack: Stack, bots: string[], firstUser: bigint): Build {
  let voter = 0;
  return () => ({
    path: "/internal/v1/votes",
    headers: { authorization: stack.internalKey },
    body: `{"bot_id":"${bots[voter % bots.length]}","user_id":"${firstUser + BigInt(voter++)}"}`,
  });
}

/** Waits until MIX_PATH has received `target` deliveries in all (or the deadline passes). */
async function waitReceived(stack: Stack, target: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (stack.receiver.received(MIX_PATH) < target && Date.now() < deadline) await sleep(20);
}

/** Votes in vote_log of users [from, to), counted again until the count is stable and all arrived. */
async function waitDelivered(
  stack: Stack,
  users: { from: bigint; to: bigint },
  receivedSoFar: () => number,
): Promise<{ recorded: number; delivered: number }> {
  // Votes whose request was still in flight when a round ended may commit a moment later: count
  // again until the count is stable and every recorded vote has arrived (or the deadline passes).
  const countRecorded = async () =>
    Number(
      (
        await stack.db.query("SELECT count(*) FROM vote_log WHERE user_id >= $1 AND user_id < $2", [
          String(users.from),
          String(users.to),
        ])
      ).rows[0].count,
    );
  const deadline = Date.now() + 180_000;
  let recorded = await countRecorded();
  for (;;) {
    while (receivedSoFar() < recorded && Date.now() < deadline) await sleep(50);
    const again = await countRecorded();
    if (again === recorded || Date.now() >= deadline) break;
    recorded = again;
  }
  return { recorded, delivered: receivedSoFar() };
}

/** GC seconds of vote-ingest and the dispatcher so far. */
async function gcNow(stack: Stack): Promise<{ ingest: number | null; dispatcher: number | null }> {
  const [ingest, dispatcher] = await Promise.all([
    gcSeconds(`${stack.ingestUrl}/metrics`),
    gcSeconds(stack.dispatcherMetricsUrl),
  ]);
  return { ingest, dispatcher };
}

/** Recording alone: the mix's rounds with no dispatcher running; then one delivers the votes. */
async function ingestAlone(
  stack: Stack,
  settings: Settings,
  bots: string[],
): Promise<{ result: IngestAloneResult; rounds: Round[] }> {
  await stack.stopDispatchers();
  const users = { from: 9000000000000000000n, to: 9100000000000000000n };
  const build = votesOf(stack, bots, users.from);
  const receivedBefore = stack.receiver.received(MIX_PATH);
  const rounds = await alternate(stack, settings, build, undefined, {
    settle: async (round) => round.recorded,
  });
  // The dispatcher's floor (got, and Node's own client beside it), each sending half as many
  // deliveries as were recorded before the drain and half after it (so a change in the machine's
  // load falls on all alike), after a warm-up.
  const targets = bots.map((botId, i) => ({ botId, url: stack.receiver.url(SENDER_FLOOR_PATH, i) }));
  const floors = {
    got: await stack.startSenderFloor(targets, "got"),
    node: await stack.startSenderFloor(targets, "node"),
  };
  const half = Math.max(1_000, Math.round(rounds.reduce((a, r) => a + r.votes, 0) / 2));
  const senderSeconds = { got: 0, node: 0 };
  const senderLost = { got: 0, node: 0 };
  const floorRound = async () => {
    for (const client of ["got", "node"] as const) {
      const floor = floors[client];
      const before = cpuSeconds(floor.pid);
      const { delivered } = await floor.send(half);
      senderSeconds[client] += cpuSeconds(floor.pid) - before;
      // The floor's loss is its client's, not ours: kept as a figure, never a reason to abort.
      senderLost[client] += half - delivered;
    }
  };
  await Promise.all([floors.got.send(1_000), floors.node.send(1_000)]);
  await floorRound();
  // The dispatcher's own cost on a full queue: counters read at its first delivery (after its
  // start-up) and once every vote has arrived, divided by the deliveries in between.
  const dispatcherPid = (await stack.startDispatchers(1))[0]?.child.pid;
  await waitReceived(stack, receivedBefore + 1, 30_000);
  const drainFrom = {
    reading: await read(stack, dispatcherPid),
    received: stack.receiver.received(MIX_PATH),
  };
  const { recorded, delivered } = await waitDelivered(
    stack,
    users,
    () => stack.receiver.received(MIX_PATH) - receivedBefore,
  );
  const drained = stack.receiver.received(MIX_PATH) - drainFrom.received;
  const drainCpu = cpuPerVote(drainFrom.reading, await read(stack, dispatcherPid), drained);
  await stack.stopDispatchers();
  await floorRound();
  await Promise.all([floors.got.stop(), floors.node.stop()]);
  const senderFloorUs = {
    got: Math.round((senderSeconds.got * 1e6) / (2 * half)),
    node: Math.round((senderSeconds.node * 1e6) / (2 * half)),
  };
  const result: IngestAloneResult = {
    floor: { rps: Math.round(mean(rounds.map((r) => r.floor.rps))) },
    ours: {
      rps: Math.round(mean(rounds.map((r) => r.ours.rps))),
      non2xx: rounds.reduce((a, r) => a + r.ours.non2xx, 0),
    },
    ratio: ratioOf(rounds),
    roundRatios: roundRatiosOf(rounds),
    cpuMicrosecondsPerVote: meanCpu(rounds), // no dispatcher: its column reads 0
    recorded,
    delivered,
    drainCpuMicrosecondsPerDelivery: {
      dispatcher: drainCpu.dispatcher,
      postgres: drainCpu.postgres,
      redis: drainCpu.redis,
    },
    senderFloorCpuMicrosecondsPerDelivery: senderFloorUs,
    senderFloorSent: 2 * half,
    senderFloorLost: senderLost,
    dispatcherVsSenderFloor: round2(drainCpu.dispatcher / Math.max(1, senderFloorUs.got)),
  };
  const c = result.cpuMicrosecondsPerVote;
  log(
    `webhook-mix, no dispatcher running (recording alone): ingest ${result.ours.rps} votes/s vs floor ${result.floor.rps} = ${result.ratio}× ` +
      `(rounds ${result.roundRatios.join(", ")}); CPU µs per vote: ingest ${c.ingest}, postgres ${c.postgres}, ` +
      `redis ${c.redis}, load ${c.loadGenerator}; then ${delivered}/${recorded} delivered by one dispatcher ` +
      `(CPU µs per delivery: dispatcher ${drainCpu.dispatcher}, postgres ${drainCpu.postgres}, redis ${drainCpu.redis}; ` +
      `the sender floor ${senderFloorUs.got}, with Node's client instead of got ${senderFloorUs.node}: ` +
      `dispatcher ${result.dispatcherVsSenderFloor}× the floor; the floor lost got ${senderLost.got}, node ${senderLost.node} of ${2 * half} each)`,
  );
  return { result, rounds };
}

export async function webhookMix(
  stack: Stack,
  settings: Settings,
  bots: string[],
): Promise<WebhookMixResult> {
  const dispatcherPid = (await stack.startDispatchers(1))[0]?.child.pid;
  const users = { from: 5000000000000000000n, to: 6000000000000000000n };
  const build = votesOf(stack, bots, users.from);
  const received = () => stack.receiver.received(MIX_PATH);
  // received() counts every delivery of MIX_PATH so far; the mix's votes are those after `first`.
  const first = received();
  // Warm-up (JIT, pools, keep-alive connections): one short round of ours, not measured, delivered
  // before the first round starts.
  const warm = await load({
    url: stack.ingestUrl,
    method: "POST",
    durationS: 1,
    connections: settings.connections,
    request: build,
  });
  await waitReceived(stack, first + warm.total - warm.non2xx, 30_000);
  const rates: number[] = [];
  const gc = { ingest: 0 as number | null, dispatcher: 0 as number | null, votes: 0 };
  const addGc = (k: "ingest" | "dispatcher", before: number | null, after: number | null) => {
    const sum = gc[k];
    gc[k] = sum === null || before === null || after === null ? null : sum + (after - before);
  };
  let gcBefore = await gcNow(stack);
  let latencies: number[] = [];
  let roundStart = first;
  const rounds = await alternate(stack, settings, build, dispatcherPid, {
    before: async () => {
      roundStart = received();
      stack.receiver.reset(MIX_PATH); // receipt times and latencies, not the count
      gcBefore = await gcNow(stack);
    },
    settle: async (round) => {
      // The round's votes delivered (those of earlier rounds were, before it started).
      await waitReceived(stack, roundStart + round.recorded, 60_000);
      const gcAfter = await gcNow(stack);
      const delivered = received() - roundStart;
      addGc("ingest", gcBefore.ingest, gcAfter.ingest);
      addGc("dispatcher", gcBefore.dispatcher, gcAfter.dispatcher);
      gc.votes += delivered;
      rates.push(
        stack.receiver.receivedBetween(round.from, round.to, MIX_PATH) / ((round.to - round.from) / 1000),
      );
      latencies = [...latencies, ...stack.receiver.latencies(MIX_PATH)];
      return delivered;
    },
  });
  const castEnded = Date.now();
  const { recorded, delivered } = await waitDelivered(stack, users, () => received() - first);
  const drainAfterS = Math.round((Date.now() - castEnded) / 100) / 10;
  const alone = await ingestAlone(stack, settings, bots);
  const withDispatcher = meanCpu(rounds);
  const noDispatcher = alone.result.cpuMicrosecondsPerVote;
  const deliveryAdds = cpuOf((k) => withDispatcher[k] - noDispatcher[k]);
  const redisWith = meanRedis(rounds.map((r) => r.redis));
  const redisAlone = meanRedis(alone.rounds.map((r) => r.redis));
  const txWith = round2(mean(rounds.map((r) => r.transactions)));
  const txAlone = round2(mean(alone.rounds.map((r) => r.transactions)));
  const oursRps = mean(rounds.map((r) => r.ours.rps));
  const pipelineRatio = round2(oursRps / Math.max(1, mean(alone.rounds.map((r) => r.ours.rps))));
  const perDeliveredVote: PerDeliveredVote = {
    pipelineRatio,
    noDispatcher,
    withDispatcher,
    deliveryAdds,
    deliverySide: withDispatcher.dispatcher + deliveryAdds.postgres + deliveryAdds.redis,
    redisCommands: {
      noDispatcher: redisAlone,
      withDispatcher: redisWith,
      deliveryAdds: redisDifference(redisWith, redisAlone),
    },
    postgresTransactions: {
      noDispatcher: txAlone,
      withDispatcher: txWith,
      deliveryAdds: round2(txWith - txAlone),
    },
  };
  const result: WebhookMixResult = {
    pipelineRatio,
    perDeliveredVote,
    floor: {
      rps: Math.round(mean(rounds.map((r) => r.floor.rps))),
      p50: mean(rounds.map((r) => r.floor.p50)),
      p99: mean(rounds.map((r) => r.floor.p99)),
    },
    ours: {
      rps: Math.round(oursRps),
      p50: mean(rounds.map((r) => r.ours.p50)),
      p99: mean(rounds.map((r) => r.ours.p99)),
      non2xx: rounds.reduce((a, r) => a + r.ours.non2xx, 0),
    },
    ratio: ratioOf(rounds),
    roundRatios: roundRatiosOf(rounds),
    deliveriesPerSecondWhileCasting: Math.round(mean(rates)),
    recorded,
    delivered,
    drainAfterS,
    latencyMs: { p50: median(latencies), p99: percentile(latencies, 99) },
    cpuMicrosecondsPerVote: withDispatcher,
    gcMicrosecondsPerVote: {
      ingest: gc.ingest === null ? null : Math.round((gc.ingest * 1e6) / Math.max(1, gc.votes)),
      dispatcher: gc.dispatcher === null ? null : Math.round((gc.dispatcher * 1e6) / Math.max(1, gc.votes)),
    },
    ingestAlone: alone.result,
  };
  log(
    `webhook-mix: pipeline ratio ${pipelineRatio} (ingest ${result.ours.rps} votes/s delivering every vote ÷ ${alone.result.ours.rps} with no dispatcher); ` +
      `vs floor ${result.floor.rps} = ${result.ratio}× (rounds ${result.roundRatios.join(", ")}); ` +
      `${result.deliveriesPerSecondWhileCasting} deliveries/s while casting; ${delivered}/${recorded} recorded votes delivered ` +
      `(${drainAfterS} s after the last vote); vote → delivery p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms; ` +
      `delivery side ${perDeliveredVote.deliverySide} µs per delivered vote; Redis commands per vote ${redisWith.total} (${redisAlone.total} with no dispatcher); ` +
      `GC µs per vote: ingest ${result.gcMicrosecondsPerVote.ingest ?? "?"}, dispatcher ${result.gcMicrosecondsPerVote.dispatcher ?? "?"}`,
  );
  return result;
}
