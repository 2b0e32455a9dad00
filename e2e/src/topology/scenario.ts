/**
 * The topology suite's scenario: mixed load on the replicas (votes through the ingest replicas for
 * bots with webhooks, checks and stats posts through the API replicas) while processes and a Redis
 * master are killed and the API replicas are restarted one by one; probes of the shared rate limit
 * and of token rotation; then the wait for every accepted vote's delivery. Built of the phases in
 * phases.ts (fleet, load, probes, faults, tally). Returns the figures; `violations()` turns them
 * into the list of broken promises.
 */
import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { sleep } from "../processes.js";
import {
  type Bot,
  CHECK_LIMIT,
  createBot,
  type Deliveries,
  type Fault,
  faultRunner,
  type LimitProbe,
  limitProbe,
  MAX_IN_FLIGHT,
  type RotationProbe,
  rotationProbe,
  startFleet,
  startLoad,
  tallyDeliveries,
} from "./phases.js";
import { count, failures, percentile, statusList, type Tally } from "./tally.js";
import type { Replica, Topology } from "./topology.js";

export interface ScenarioOptions {
  loadMs: number;
  votesPerSecond: number;
  checksPerSecond: number;
  statsPerSecond: number;
  webhookBots: number;
  /** How long the Redis master stays down. */
  redisDownMs: number;
  /** Deadline for the last delivery after the load ends. */
  deliveryDeadlineMs: number;
  /** Epoch ms by which the scenario must be over (the delivery wait is cut short to meet it). */
  finishBy: number;
  log(line: string): void;
}

export type { Fault, LimitProbe, RotationProbe };

export interface Figures extends Deliveries {
  votes: Tally;
  checks: Tally;
  stats: Tally;
  /** Check answers for a user whose vote was answered 201 that said "not voted". */
  checkMismatches: number;
  limitProbes: LimitProbe[];
  rotationProbes: RotationProbe[];
  faults: Fault[];
  /** During the Redis master's outage: API answers of 500 or more, vote answers by status. */
  redisOutage: { apiServerErrors: number; votes: Map<number, number>; votesFailed: number };
  /** API replicas stopped by SIGTERM: their exit codes. */
  apiExitCodes: (number | null)[];
  loadSeconds: number;
  /** The machine's 1-minute load average when the load started and when it ended. */
  loadAverage: [number, number];
  /** p99 event-loop delay of this process (client and receiver) during the load, ms. */
  clientLagP99Ms: number;
}

export async function runScenario(topology: Topology, options: ScenarioOptions): Promise<Figures> {
  const { log } = options;
  const fleet = await startFleet(topology, { api: 2, "vote-ingest": 2, "webhook-dispatcher": 3 }, log);
  const { api, ingest, live, enter } = fleet;
  try {
    const bots: Bot[] = [];
    for (let i = 0; i < options.webhookBots; i++) bots.push(await createBot(fleet, topology, true));
    const limitBots = [await createBot(fleet, topology, false), await createBot(fleet, topology, false)];
    // Spent by each limit probe's wait for the replicas' limiters to count on Redis.
    const scratchBot = await createBot(fleet, topology, false);
    const rotationBots = [await createBot(fleet, topology, false), await createBot(fleet, topology, false)];
    log(`${bots.length} bots with webhooks on the receiver, 5 probe bots`);

    // ---- load ----
    const load = startLoad(fleet, bots, options);
    const { at } = load;
    let redisDown: { from: number; to: number } | undefined;
    const outage = { apiServerErrors: 0, votes: new Map<number, number>(), votesFailed: 0 };
    const inOutage = (sentAt: number) =>
      redisDown !== undefined && sentAt >= redisDown.from && sentAt <= redisDown.to;
    load.observe((kind, outcome, sentAt) => {
      if (!inOutage(sentAt)) return;
      if (kind === "votes") {
        if (outcome.kind === "answered")
          outage.votes.set(outcome.status, (outage.votes.get(outcome.status) ?? 0) + 1);
        else outage.votesFailed++;
      } else if (outcome.kind === "answered" && outcome.status >= 500) outage.apiServerErrors++;
    });

    // ---- probes and faults, in order, while the load runs ----
    const { faults, fault } = faultRunner(load, log);
    const limitProbes: LimitProbe[] = [];
    const rotationProbes: RotationProbe[] = [];
    const apiExitCodes: (number | null)[] = [];
    const now = load.now;

    const timeline = (async () => {
      await at(3_000);
      limitProbes.push(await limitProbe(fleet, "limit probe 1", limitBots[0] as Bot, scratchBot, log));
      rotationProbes.push(await rotationProbe(fleet, "rotation probe 1", rotationBots[0] as Bot, log));

      await at(10_000);
      await fault("SIGKILL dispatcher-1, start dispatcher-4", async () => {
        const victim = live.get("dispatcher-1") as Replica;
        await victim.process.kill();
        live.delete(victim.name);
        const fresh = await topology.start("webhook-dispatcher");
        live.set(fresh.name, fresh);
        return undefined;
      });

      await at(16_000);
      await fault("SIGKILL ingest-1, start ingest-3", async () => {
        const victim = live.get("ingest-1") as Replica;
        await victim.process.kill();
        live.delete(victim.name);
        ingest.remove(victim.name);
        enter(ingest, await topology.start("vote-ingest"));
        return undefined;
      });

      await at(22_000);
      for (const old of fleet.apiNames()) {
        await fault(`rolling restart: start the next api, SIGTERM ${old}`, async () => {
          enter(api, await topology.start("api"));
          const victim = live.get(old) as Replica;
          const signalledAt = now();
          const code = await victim.process.stop();
          apiExitCodes.push(code);
          live.delete(old);
          api.remove(old);
          return `SIGTERM at ${(signalledAt / 1000).toFixed(1)} s, exited ${code} at ${(now() / 1000).toFixed(1)} s`;
        });
      }

      await at(36_000);
      // The master of the queue's slot: the hardest one to lose (BullMQ's whole queue is on it).
      const queueKey = `${DEFAULT_QUEUE_PREFIX}:webhook-deliveries`;
      const port = await topology.redis.masterOf(queueKey);
      await fault(
        `SIGKILL the Redis master on ${port} (queue's slot) for ${options.redisDownMs} ms`,
        async () => {
          const from = now();
          await topology.redis.kill(port);
          redisDown = { from, to: Number.POSITIVE_INFINITY };
          await sleep(options.redisDownMs);
          const restartAt = now();
          await topology.redis.restart(port);
          // Requests sent until it answers again belong to the outage.
          redisDown = { from, to: now() };
          return `down ${restartAt - from} ms, whole again after ${now() - restartAt} ms more`;
        },
      );

      await at(46_000);
      limitProbes.push(await limitProbe(fleet, "limit probe 2", limitBots[1] as Bot, scratchBot, log));
      rotationProbes.push(await rotationProbe(fleet, "rotation probe 2", rotationBots[1] as Bot, log));
    })();

    // The load runs its full length and until the timeline is through.
    let timelineError: unknown;
    await Promise.all([timeline.catch((error) => (timelineError = error)), at(options.loadMs)]);
    const end = await load.stop();
    const { votes, checks, stats } = load;
    log(
      `load done after ${end.loadSeconds.toFixed(1)} s: votes ${statusList(votes)}; checks ${statusList(checks)}; stats ${statusList(stats)}`,
    );
    if (timelineError) throw timelineError;

    // ---- tally ----
    const deliveries = await tallyDeliveries(
      topology,
      load,
      end.loadEnd,
      faults,
      { deadlineMs: options.deliveryDeadlineMs, finishBy: options.finishBy },
      log,
    );
    return {
      votes,
      checks,
      stats,
      checkMismatches: load.checkMismatches(),
      ...deliveries,
      limitProbes,
      rotationProbes,
      faults,
      redisOutage: outage,
      apiExitCodes,
      loadSeconds: end.loadSeconds,
      loadAverage: end.loadAverage,
      clientLagP99Ms: end.clientLagP99Ms,
    };
  } finally {
    fleet.close();
  }
}

/** Every promise the figures break, one sentence each. */
export function violations(f: Figures, options: ScenarioOptions): string[] {
  const out: string[] = [];
  const expectedVotes = options.votesPerSecond * (options.loadMs / 1000);
  // The load is open-loop at the planned rate; a send is skipped only while 1,500 requests of its
  // kind are already waiting (a stack that fell far behind). Skips are reported in the summary;
  // the run fails when the votes actually sent fall short of 95 % of the plan.
  if (f.votes.sent < expectedVotes * 0.95)
    out.push(
      `only ${f.votes.sent} votes were sent of the ${expectedVotes} the load calls for (the stack fell behind: sends skipped with ${MAX_IN_FLIGHT} requests of their kind in flight: votes ${f.votes.skipped}, checks ${f.checks.skipped}, stats ${f.stats.skipped})`,
    );
  if (f.undelivered.length > 0)
    out.push(
      `${f.undelivered.length} of ${f.accepted} votes answered 201 were not delivered by the deadline (${(f.deliveryWaitMs / 1000).toFixed(0)} s after the load; e.g. ${f.undelivered.slice(0, 3).join(", ")})`,
    );
  const ratio = f.distinctDeliveries === 0 ? 0 : f.duplicates / f.distinctDeliveries;
  if (ratio >= 0.005)
    out.push(
      `${f.duplicates} duplicate deliveries (${(ratio * 100).toFixed(2)} %), not under 0.5 % (repeats received ${[
        ...f.duplicatesByPhase,
      ]
        .map(([phase, n]) => `${phase === "before any fault" ? phase : `after "${phase}"`}: ${n}`)
        .join(
          ", ",
        )}; median ${(f.repeatGapMedianMs / 1000).toFixed(1)} s after the first receipt; ${f.unrecordedRepeats} receipts with no recorded attempt; recorded failed attempts: ${[...f.failedKinds].map(([k, n]) => `${k} ×${n}`).join(", ") || "none"})`,
    );
  for (const [name, tally] of [
    ["votes", f.votes],
    ["checks", f.checks],
    ["stats posts", f.stats],
  ] as const) {
    if (tally.serverErrors.length > 0) {
      const sample = tally.serverErrors
        .slice(0, 3)
        .map((e) => `${e.status} from ${e.replica} at ${(e.at / 1000).toFixed(1)} s: ${e.body}`)
        .join(" | ");
      out.push(`${tally.serverErrors.length} ${name} answered 5xx (${sample})`);
    }
  }
  for (const [name, tally] of [
    ["checks", f.checks],
    ["stats posts", f.stats],
  ] as const) {
    if (tally.resetsReused + tally.resetsNew > 0)
      out.push(
        `${tally.resetsReused + tally.resetsNew} ${name} lost to a connection reset (${tally.resetsReused} on keep-alive connections; ${tally.resetSamples
          .slice(0, 5)
          .map((r) => `${r.replica} ${r.code} at ${(r.at / 1000).toFixed(1)} s`)
          .join(", ")})`,
      );
    if (tally.timeouts > 0) out.push(`${tally.timeouts} ${name} timed out`);
    if (tally.refused > 0) out.push(`${tally.refused} ${name} found no replica accepting connections`);
    if (tally.errors.size > 0)
      out.push(`${name} failed with ${[...tally.errors].map(([code, n]) => `${code} ×${n}`).join(", ")}`);
    const other = tally.sent - count(tally, 200) - failures(tally) - tally.serverErrors.length;
    if (other > 0) out.push(`${other} ${name} answered neither 200 nor 5xx (${statusList(tally)})`);
  }
  const votesOther = f.votes.sent - count(f.votes, 201) - failures(f.votes) - f.votes.serverErrors.length;
  if (votesOther > 0) out.push(`${votesOther} votes answered neither 201 nor 5xx (${statusList(f.votes)})`);
  if (f.votes.timeouts > 0) out.push(`${f.votes.timeouts} votes timed out`);
  if (f.checkMismatches > 0)
    out.push(`${f.checkMismatches} checks said "not voted" for a user whose vote was answered 201`);
  for (const probe of f.limitProbes) {
    // The shared window allows the limit; a replica counting alone (Redis later than the
    // limiter's deadline) allows its share (API_REPLICAS=2: half the limit) besides, by design.
    if (probe.counted - probe.local > CHECK_LIMIT)
      out.push(
        `${probe.label}: ${probe.counted - probe.local} checks of one token were counted and allowed in the shared window (limit ${CHECK_LIMIT})`,
      );
    if (probe.local > CHECK_LIMIT)
      out.push(
        `${probe.label}: ${probe.local} checks of one token were allowed by the replicas counting alone (two shares of ${CHECK_LIMIT / 2})`,
      );
    // A request counted twice in the shared window (e.g. sent to Redis again after a call that
    // timed out but was executed late) takes the place of another's 200.
    if (probe.sharedRefusals > 0 && probe.counted + probe.failedOpen < CHECK_LIMIT)
      out.push(
        `${probe.label}: the shared window refused after ${probe.counted} counted and ${probe.failedOpen} failed-open answers (limit ${CHECK_LIMIT}): ${CHECK_LIMIT - probe.counted - probe.failedOpen} of its counts answered no request`,
      );
    if (probe.repeatedRemaining > 0)
      out.push(
        `${probe.label}: ${probe.repeatedRemaining} answers repeated another's RateLimit-Remaining (the replicas do not share the window; ${probe.local} were counted by a replica alone, after ${probe.waitedMs} ms waiting for the limiters on Redis)`,
      );
    for (const [name, first] of probe.firstRefusal)
      if (first === null)
        out.push(
          `${probe.label}: ${name} never answered 429 (${probe.counted} counted checks in ${probe.ms} ms)`,
        );
    if (probe.other.length > 0)
      out.push(
        `${probe.label}: ${probe.other.length} answers were neither 200 nor 429 (${probe.other.slice(0, 3).join(" | ")})`,
      );
  }
  for (const probe of f.rotationProbes) {
    for (const [name, first] of probe.firstRefusedMs) {
      const last = probe.lastAcceptedMs.get(name) ?? null;
      if (first === null) out.push(`${probe.label}: ${name} never refused the rotated-out token`);
      if (last !== null && last > 1_000)
        out.push(
          `${probe.label}: ${name} accepted the rotated-out token in a request sent ${last} ms after the rotation`,
        );
    }
    out.push(...probe.problems.slice(0, 5).map((p) => `${probe.label}: ${p}`));
  }
  if (f.redisOutage.apiServerErrors > 0)
    out.push(`${f.redisOutage.apiServerErrors} API answers were 5xx while the Redis master was down`);
  const outageVotes = [...f.redisOutage.votes.values()].reduce((a, b) => a + b, 0);
  if ((f.redisOutage.votes.get(201) ?? 0) === 0)
    out.push("no vote was answered 201 while the Redis master was down");
  else if ((f.redisOutage.votes.get(201) ?? 0) < outageVotes)
    out.push(
      `votes while the Redis master was down: ${[...f.redisOutage.votes].map(([s, n]) => `${s}×${n}`).join(" ")} (all must be 201)`,
    );
  if (f.apiExitCodes.some((code) => code !== 0))
    out.push(`API replicas stopped by SIGTERM exited ${f.apiExitCodes.join(", ")}, not 0`);
  return out;
}

/** The one summary line. */
export function summary(f: Figures, totalSeconds: number): string {
  const ratio = f.distinctDeliveries === 0 ? 0 : (f.duplicates / f.distinctDeliveries) * 100;
  const rotation = f.rotationProbes
    .map((p) => [...p.firstRefusedMs.values()].map((ms) => (ms === null ? "never" : `${ms}`)).join("/"))
    .join(", ");
  const limit = f.limitProbes
    .map(
      (p) =>
        `${p.counted} counted${p.failedOpen ? ` + ${p.failedOpen} failed open` : ""} then 429 on ${[...p.firstRefusal.values()].filter((v) => v !== null).length} of ${p.firstRefusal.size} replicas`,
    )
    .join(", ");
  const resets = [f.checks, f.stats].reduce((n, t) => n + t.resetsReused + t.resetsNew, 0);
  const refused = [f.votes, f.checks, f.stats].reduce((n, t) => n + t.refused, 0);
  return [
    `topology: ${f.loadSeconds.toFixed(0)} s load`,
    `votes ${f.votes.sent} sent, ${f.accepted} answered 201, ${f.delivered} delivered (last ${(f.lastDeliveryAfterLoadMs / 1000).toFixed(1)} s after the load)`,
    `duplicates ${f.duplicates} (${ratio.toFixed(2)} %)`,
    `sends skipped while ${MAX_IN_FLIGHT} of their kind waited: votes ${f.votes.skipped}, checks ${f.checks.skipped}, stats ${f.stats.skipped}`,
    `votes answered in p50 ${percentile(f.votes, 50).toFixed(0)} / p99 ${percentile(f.votes, 99).toFixed(0)} ms`,
    `checks ${f.checks.sent} (${statusList(f.checks)}; p50 ${percentile(f.checks, 50).toFixed(0)} / p99 ${percentile(f.checks, 99).toFixed(0)} ms)`,
    `stats ${f.stats.sent} (${statusList(f.stats)}; p50 ${percentile(f.stats, 50).toFixed(0)} / p99 ${percentile(f.stats, 99).toFixed(0)} ms)`,
    `limit ${limit}`,
    `rotated token refused from ${rotation} ms`,
    `API resets ${resets}, refused connects ${refused}, votes lost to the ingest SIGKILL ${failures(f.votes)}`,
    `Redis master down: API 5xx ${f.redisOutage.apiServerErrors}, votes ${[...f.redisOutage.votes].map(([s, n]) => `${s}×${n}`).join(" ") || "none"}`,
    `machine load average ${f.loadAverage.map((l) => l.toFixed(1)).join(" → ")}, client event-loop p99 ${f.clientLagP99Ms.toFixed(0)} ms`,
    `${totalSeconds.toFixed(0)} s in all`,
  ].join("; ");
}
