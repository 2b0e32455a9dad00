/**
 * The two whole-pipeline scenarios of `pnpm bench` (ingest → outbox → queue → dispatcher →
 * receiver, every app on this box):
 *
 * - `webhook-mix`: every voted bot has a webhook and one dispatcher runs while votes are cast at
 *   full speed, alternating with the floor's vote route. Targets: ingest ≥ 0.3× of the floor, and
 *   every recorded vote delivered by the end. Also reports deliveries/s *while votes are cast*, and
 *   the same rounds with no dispatcher running (the ratio's upper bound: what the ingest alone
 *   reaches; the difference is what delivering costs on the same cores).
 * - `hostile`: 10 % of the bots' receivers hold every request until the dispatcher's timeout, 10 %
 *   answer 500 at once, 5 % have a host name that does not resolve (`*.invalid`); votes at an even
 *   500/s. Targets: healthy bots' p99 vote → delivery < 250 ms, and one replica drains ≥ 1,000
 *   healthy deliveries/s from a queue filled with the same mix.
 */
import type pg from "pg";
import { type LoadResult, load } from "./load.js";
import { cpuSeconds, cpuSecondsOf, gcSeconds } from "./procs.js";
import type { Receiver } from "./receiver.js";

export const MIX_PATH = "/mix";
export const HOSTILE_OK_PATH = "/hostile-ok";

type Build = () => { path: string; headers?: Record<string, string>; body?: string };

export interface PipelineContext {
  ingestUrl: string;
  floorUrl: string;
  internalKey: string;
  receiver: Receiver;
  db: pg.Client;
  roundS: number;
  rounds: number;
  connections: number;
  redisPid: () => number | undefined;
  ingestPid: () => number | undefined;
  /** Prometheus endpoints of vote-ingest and of the (first) dispatcher: GC time. */
  ingestMetricsUrl: string;
  dispatcherMetricsUrl: string;
  /** Stops every running dispatcher and starts one; returns its pid. */
  restartDispatcher: () => Promise<number | undefined>;
  stopDispatchers: () => Promise<void>;
  /** Votes at an even `rate` per second for `durationS` seconds. */
  paced: (url: string, rate: number, durationS: number, connections: number, request: Build) => Promise<void>;
  log: (line: string) => void;
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

const median = (xs: number[]) => percentile(xs, 50);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Bots of the two scenarios, inserted in one statement each. */
export async function seedPipelineBots(
  client: pg.Client,
  encrypt: (secret: string) => string,
  receiver: Receiver,
  ids: { mix: string[]; hostile: string[] },
): Promise<{ hostileHealthy: Set<string> }> {
  const insert = (rows: { id: string; url: string }[]) =>
    client.query(
      `INSERT INTO bots (id, status, approved_at, webhook_url, webhook_secret_encrypted)
       SELECT id, 'approved', now(), url, secret FROM unnest($1::text[], $2::text[], $3::text[]) AS t(id, url, secret)`,
      [
        rows.map((r) => r.id),
        rows.map((r) => r.url),
        rows.map((r, i) => encrypt(`whsec_bench_${r.id}_${i}`)),
      ],
    );
  await insert(ids.mix.map((id, i) => ({ id, url: receiver.url(MIX_PATH, i) })));
  const hostileHealthy = new Set<string>();
  await insert(
    ids.hostile.map((id, i) => {
      const kind = i % 20; // 2 of 20 hold, 2 of 20 fail, 1 of 20 does not resolve, 15 of 20 healthy
      if (kind < 2) return { id, url: receiver.url(`/hold/${i}`, i) };
      if (kind < 4) return { id, url: receiver.url(`/fail/${i}`, i) };
      if (kind < 5) return { id, url: `http://bot-${i}.invalid/hook` };
      hostileHealthy.add(id);
      return { id, url: receiver.url(HOSTILE_OK_PATH, i) };
    }),
  );
  return { hostileHealthy };
}

/**
 * A live directory's delivery history: `perBot` past votes of each of `bots`, each with a delivery
 * delivered by its first attempt, a day or more ago (user ids in a range no scenario casts or
 * counts: they sort below every scenario's). Without it `webhook_deliveries` and `webhook_attempts`
 * start empty, and the `ANALYZE` after seeding tells the planner they are empty: with autovacuum
 * off (this machine's and CI's PostgreSQL) that stays true for the whole run, and plans made on it
 * are cached per connection for its life (the foreign-key check of every attempt row a record
 * statement inserts was measured at 4 µs or 112–285 µs per row from one run to the next).
 */
export async function seedDeliveryHistory(
  client: pg.Client,
  bots: string[],
  perBot: number,
): Promise<number> {
  await client.query(
    `WITH v AS (
       INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT b.id, (1000000000000000000 + g)::text,
              now() - interval '1 day' - (g || ' minutes')::interval
         FROM unnest($1::text[]) AS b(id), generate_series(1, $2::int) g
       RETURNING id, bot_id, voted_at
     ), d AS (
       INSERT INTO webhook_deliveries
              (id, bot_id, vote_id, state, attempts_made, next_attempt_at, handed_off_at,
               created_at, updated_at, completed_at, series)
       SELECT gen_random_uuid(), v.bot_id, v.id, 'delivered', 1, v.voted_at, v.voted_at,
              v.voted_at, v.voted_at + interval '40 milliseconds', v.voted_at + interval '40 milliseconds', 0
         FROM v
       RETURNING id, bot_id, created_at
     )
     INSERT INTO webhook_attempts
            (delivery_id, series, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
     SELECT d.id, 0, d.bot_id, 1, 200, NULL, 30, d.created_at + interval '5 milliseconds' FROM d`,
    [bots, perBot],
  );
  return bots.length * perBot;
}

interface Cpu {
  ingest: number;
  dispatcher: number;
  postgres: number;
  redis: number;
  loadGenerator: number;
}

function cpuNow(ctx: PipelineContext, dispatcherPid: number | undefined): Cpu {
  return {
    ingest: cpuSeconds(ctx.ingestPid()),
    dispatcher: cpuSeconds(dispatcherPid),
    postgres: cpuSecondsOf("postgres"),
    redis: cpuSeconds(ctx.redisPid()),
    loadGenerator: cpuSeconds(process.pid),
  };
}

/** CPU microseconds per vote of each process between two readings. */
function perVote(before: Cpu, after: Cpu, votes: number): Cpu {
  const us = (k: keyof Cpu) => Math.round(((after[k] - before[k]) * 1e6) / Math.max(1, votes));
  return {
    ingest: us("ingest"),
    dispatcher: us("dispatcher"),
    postgres: us("postgres"),
    redis: us("redis"),
    loadGenerator: us("loadGenerator"),
  };
}

export interface WebhookMixResult {
  floor: { rps: number; p50: number; p99: number };
  ours: { rps: number; p50: number; p99: number; non2xx: number };
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
  /** The same votes cast while no dispatcher runs: the ratio's upper bound (ingestAlone). */
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
}

/** Rounds of the floor's vote route and ours, alternating (the floor first), with CPU per vote of ours. */
async function alternate(
  ctx: PipelineContext,
  build: Build,
  dispatcherPid: number | undefined,
  hooks: {
    /** Just before each of our rounds (after the floor's). */
    before?: () => Promise<void>;
    after?: (round: { from: number; to: number; votes: number }) => Promise<void>;
  } = {},
): Promise<{ floors: LoadResult[]; ours: LoadResult[]; cpus: Cpu[]; roundRatios: number[] }> {
  const run = (url: string) =>
    load({ url, method: "POST", durationS: ctx.roundS, connections: ctx.connections, request: build });
  const floors: LoadResult[] = [];
  const ours: LoadResult[] = [];
  const cpus: Cpu[] = [];
  for (let round = 0; round < ctx.rounds; round++) {
    floors.push(await run(ctx.floorUrl));
    await hooks.before?.();
    const before = cpuNow(ctx, dispatcherPid);
    const from = Date.now();
    const r = await run(ctx.ingestUrl);
    const to = Date.now();
    ours.push(r);
    cpus.push(perVote(before, cpuNow(ctx, dispatcherPid), r.total - r.non2xx));
    await hooks.after?.({ from, to, votes: r.total - r.non2xx });
  }
  const roundRatios = ours.map((o, i) => Math.round((o.rps / Math.max(1, floors[i]?.rps ?? 1)) * 100) / 100);
  return { floors, ours, cpus, roundRatios };
}

const average = (xs: LoadResult[], k: keyof LoadResult) =>
  xs.reduce((a, x) => a + x[k], 0) / Math.max(1, xs.length);
/** Ours / the floor, mean req/s over the rounds, to two decimals. */
const ratioOf = (ours: LoadResult[], floors: LoadResult[]) =>
  Math.round((average(ours, "rps") / Math.max(1, average(floors, "rps"))) * 100) / 100;
/** Mean CPU µs per vote of each process over the rounds. */
function meanCpu(cpus: Cpu[]): Cpu {
  const mean = (k: keyof Cpu) => Math.round(cpus.reduce((a, c) => a + c[k], 0) / Math.max(1, cpus.length));
  return {
    ingest: mean("ingest"),
    dispatcher: mean("dispatcher"),
    postgres: mean("postgres"),
    redis: mean("redis"),
    loadGenerator: mean("loadGenerator"),
  };
}

/** POST /internal/v1/votes over `bots` round-robin, each vote by a new user from `firstUser` on. */
function votesOf(ctx: PipelineContext, bots: string[], firstUser: bigint): Build {
  let voter = 0;
  return () => ({
    path: "/internal/v1/votes",
    headers: { authorization: ctx.internalKey },
    body: `{"bot_id":"${bots[voter % bots.length]}","user_id":"${firstUser + BigInt(voter++)}"}`,
  });
}

/** Votes in vote_log of users [from, to), counted again until the count is stable and all arrived. */
async function waitDelivered(
  ctx: PipelineContext,
  users: { from: bigint; to: bigint },
  receivedSoFar: () => number,
): Promise<{ recorded: number; delivered: number }> {
  // Votes whose request was still in flight when a round ended may commit a moment later: count
  // again until the count is stable and every recorded vote has arrived (or the deadline passes).
  const countRecorded = async () =>
    Number(
      (
        await ctx.db.query("SELECT count(*) FROM vote_log WHERE user_id >= $1 AND user_id < $2", [
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

/**
 * The ratio's upper bound: the mix's votes (other users) cast while no dispatcher runs, alternating
 * with the floor the same way. Each vote is still written with its delivery and handed to the
 * queue, so this is the ingest's whole share of the pipeline; what the mix's ratio lacks from this
 * one is what delivering costs on the same cores. Then one dispatcher delivers them.
 */
async function ingestAlone(ctx: PipelineContext, bots: string[]): Promise<IngestAloneResult> {
  await ctx.stopDispatchers();
  const users = { from: 9000000000000000000n, to: 9100000000000000000n };
  const build = votesOf(ctx, bots, users.from);
  const receivedBefore = ctx.receiver.received(MIX_PATH);
  const { floors, ours, cpus, roundRatios } = await alternate(ctx, build, undefined);
  await ctx.restartDispatcher();
  const { recorded, delivered } = await waitDelivered(
    ctx,
    users,
    () => ctx.receiver.received(MIX_PATH) - receivedBefore,
  );
  const result: IngestAloneResult = {
    floor: { rps: Math.round(average(floors, "rps")) },
    ours: { rps: Math.round(average(ours, "rps")), non2xx: ours.reduce((a, o) => a + o.non2xx, 0) },
    ratio: ratioOf(ours, floors),
    roundRatios,
    cpuMicrosecondsPerVote: meanCpu(cpus), // no dispatcher: its column reads 0
    recorded,
    delivered,
  };
  ctx.log(
    `webhook-mix, no dispatcher running (the ratio's upper bound): ingest ${result.ours.rps} votes/s vs floor ${result.floor.rps} = ${result.ratio}× ` +
      `(rounds ${roundRatios.join(", ")}); CPU µs per vote: ingest ${result.cpuMicrosecondsPerVote.ingest}, postgres ${result.cpuMicrosecondsPerVote.postgres}, ` +
      `redis ${result.cpuMicrosecondsPerVote.redis}, load ${result.cpuMicrosecondsPerVote.loadGenerator}; then ${delivered}/${recorded} delivered by one dispatcher`,
  );
  return result;
}

/** GC seconds of vote-ingest and the dispatcher so far. */
async function gcNow(ctx: PipelineContext): Promise<{ ingest: number | null; dispatcher: number | null }> {
  const [ingest, dispatcher] = await Promise.all([
    gcSeconds(ctx.ingestMetricsUrl),
    gcSeconds(ctx.dispatcherMetricsUrl),
  ]);
  return { ingest, dispatcher };
}

export async function webhookMix(ctx: PipelineContext, bots: string[]): Promise<WebhookMixResult> {
  const dispatcherPid = await ctx.restartDispatcher();
  const users = { from: 5000000000000000000n, to: 6000000000000000000n };
  const build = votesOf(ctx, bots, users.from);
  // Warm-up (JIT, pools, keep-alive connections): one short round of ours, not measured.
  await load({
    url: ctx.ingestUrl,
    method: "POST",
    durationS: 1,
    connections: ctx.connections,
    request: build,
  });
  const rates: number[] = [];
  const gc = { ingest: 0 as number | null, dispatcher: 0 as number | null, votes: 0 };
  const addGc = (k: "ingest" | "dispatcher", before: number | null, after: number | null) => {
    const sum = gc[k];
    gc[k] = sum === null || before === null || after === null ? null : sum + (after - before);
  };
  ctx.receiver.reset(MIX_PATH);
  let gcBefore = await gcNow(ctx);
  const { floors, ours, cpus, roundRatios } = await alternate(ctx, build, dispatcherPid, {
    before: async () => {
      gcBefore = await gcNow(ctx);
    },
    after: async (round) => {
      const gcAfter = await gcNow(ctx);
      addGc("ingest", gcBefore.ingest, gcAfter.ingest);
      addGc("dispatcher", gcBefore.dispatcher, gcAfter.dispatcher);
      gc.votes += round.votes;
      rates.push(
        ctx.receiver.receivedBetween(round.from, round.to, MIX_PATH) / ((round.to - round.from) / 1000),
      );
    },
  });
  const castEnded = Date.now();
  const latencies = [...ctx.receiver.latencies(MIX_PATH)];
  const { recorded, delivered } = await waitDelivered(ctx, users, () => ctx.receiver.received(MIX_PATH));
  const drainAfterS = Math.round((Date.now() - castEnded) / 100) / 10;
  const result: Omit<WebhookMixResult, "ingestAlone"> = {
    floor: {
      rps: Math.round(average(floors, "rps")),
      p50: average(floors, "p50"),
      p99: average(floors, "p99"),
    },
    ours: {
      rps: Math.round(average(ours, "rps")),
      p50: average(ours, "p50"),
      p99: average(ours, "p99"),
      non2xx: ours.reduce((a, o) => a + o.non2xx, 0),
    },
    ratio: ratioOf(ours, floors),
    roundRatios,
    deliveriesPerSecondWhileCasting: Math.round(rates.reduce((a, r) => a + r, 0) / Math.max(1, rates.length)),
    recorded,
    delivered,
    drainAfterS,
    latencyMs: { p50: median(latencies), p99: percentile(latencies, 99) },
    cpuMicrosecondsPerVote: meanCpu(cpus),
    gcMicrosecondsPerVote: {
      ingest: gc.ingest === null ? null : Math.round((gc.ingest * 1e6) / Math.max(1, gc.votes)),
      dispatcher: gc.dispatcher === null ? null : Math.round((gc.dispatcher * 1e6) / Math.max(1, gc.votes)),
    },
  };
  ctx.log(
    `webhook-mix: ingest ${result.ours.rps} votes/s vs floor ${result.floor.rps} = ${result.ratio}× (rounds ${roundRatios.join(", ")}); ` +
      `${result.deliveriesPerSecondWhileCasting} deliveries/s while casting; ${delivered}/${recorded} recorded votes delivered ` +
      `(${drainAfterS} s after the last vote); vote → delivery p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms; ` +
      `CPU µs per vote: ingest ${result.cpuMicrosecondsPerVote.ingest}, dispatcher ${result.cpuMicrosecondsPerVote.dispatcher}, ` +
      `postgres ${result.cpuMicrosecondsPerVote.postgres}, redis ${result.cpuMicrosecondsPerVote.redis}, load ${result.cpuMicrosecondsPerVote.loadGenerator}; ` +
      `of which GC: ingest ${result.gcMicrosecondsPerVote.ingest ?? "?"}, dispatcher ${result.gcMicrosecondsPerVote.dispatcher ?? "?"}`,
  );
  return { ...result, ingestAlone: await ingestAlone(ctx, bots) };
}

export interface HostileResult {
  healthyLatencyMs: { p50: number; p99: number; samples: number; expected: number };
  /** Healthy deliveries per second while votes arrive at 500/s (≈ 375/s is all there is). */
  healthyPerSecondAt500: number;
  /** Queue drain: healthy deliveries per second from first to last healthy receipt. */
  drain: { votes: number; healthy: number; delivered: number; perSecond: number; seconds: number };
  hostileRequests: { failed: number; held: number };
}

export async function hostile(
  ctx: PipelineContext,
  bots: string[],
  healthy: Set<string>,
  options: { seconds: number; drainVotes: number },
): Promise<HostileResult> {
  let voter = 0;
  let healthyCast = 0;
  // User ids 8… for the warm-up, 6… while votes arrive at 500/s, 7… for the drain: the receiver
  // counts each range apart, so deliveries of warm-up votes that arrive after it (a slow machine
  // is still delivering them) are not counted as the measured phase's.
  let userBase = 8000000000000000000n;
  const build: Build = () => {
    const bot = bots[voter % bots.length] as string;
    if (healthy.has(bot)) healthyCast++;
    return {
      path: "/internal/v1/votes",
      headers: { authorization: ctx.internalKey },
      body: `{"bot_id":"${bot}","user_id":"${userBase + BigInt(voter++)}"}`,
    };
  };
  const receiver = ctx.receiver;
  await ctx.restartDispatcher();
  // Two seconds of warm-up at the same rate, not measured.
  await ctx.paced(ctx.ingestUrl, 500, 2, ctx.connections, build);
  await sleep(500);
  const MEASURED = `${HOSTILE_OK_PATH}@6`;
  userBase = 6000000000000000000n;
  receiver.reset(MEASURED);
  healthyCast = 0;
  const from = Date.now();
  await ctx.paced(ctx.ingestUrl, 500, options.seconds, ctx.connections, build);
  const to = Date.now();
  const expected = healthyCast;
  const deadline = Date.now() + 5_000;
  while (receiver.received(MEASURED) < expected && Date.now() < deadline) await sleep(20);
  const latencies = [...receiver.latencies(MEASURED)];
  const healthyPerSecondAt500 = Math.round(
    receiver.receivedBetween(from, to, MEASURED) / ((to - from) / 1000),
  );
  ctx.log(
    `hostile at 500 votes/s: healthy p50 ${median(latencies)} ms, p99 ${percentile(latencies, 99)} ms ` +
      `(${latencies.length} of ${expected} healthy deliveries), ${healthyPerSecondAt500} healthy deliveries/s`,
  );

  // Drain: the queue filled with the same mix while no dispatcher runs, then one replica.
  await ctx.stopDispatchers();
  healthyCast = 0;
  userBase = 7000000000000000000n;
  const DRAIN = `${HOSTILE_OK_PATH}@7`;
  await load({
    url: ctx.ingestUrl,
    method: "POST",
    durationS: 120,
    connections: ctx.connections,
    request: build,
    amount: options.drainVotes,
  });
  const drainHealthy = healthyCast;
  // Healthy jobs left over from the 500/s phase are still queued; they are not counted here.
  await ctx.restartDispatcher();
  const drainDeadline = Date.now() + 120_000;
  while (receiver.received(DRAIN) < drainHealthy && Date.now() < drainDeadline) await sleep(20);
  const delivered = receiver.received(DRAIN);
  const { first, last } = receiver.window(DRAIN);
  const seconds = Math.max(0.001, (last - first) / 1000);
  const drain = {
    votes: options.drainVotes,
    healthy: drainHealthy,
    delivered,
    perSecond: Math.round(delivered / seconds),
    seconds: Math.round(seconds * 10) / 10,
  };
  ctx.log(
    `hostile drain, 1 dispatcher: ${delivered}/${drainHealthy} healthy delivered in ${drain.seconds} s = ${drain.perSecond} healthy deliveries/s ` +
      `(${options.drainVotes} votes in the queue; hostile requests so far: ${JSON.stringify(receiver.hostile())})`,
  );
  await ctx.stopDispatchers();
  return {
    healthyLatencyMs: {
      p50: median(latencies),
      p99: percentile(latencies, 99),
      samples: latencies.length,
      expected,
    },
    healthyPerSecondAt500,
    drain,
    hostileRequests: receiver.hostile(),
  };
}
