/**
 * The topology suite's scenario: mixed load on the replicas (votes through the ingest replicas for
 * bots with webhooks, checks and stats posts through the API replicas) while processes and a Redis
 * master are killed and the API replicas are restarted one by one; probes of the shared rate limit
 * and of token rotation; then the wait for every accepted vote's delivery. Returns the figures;
 * `violations()` turns them into the list of broken promises.
 */
import { loadavg } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { randomBotId, randomUserId } from "@botdir/db/testing";
import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { sleep } from "../processes.js";
import { type Balancer, createBalancer, type Outcome, type RequestSpec } from "./balancer.js";
import { count, failures, newTally, percentile, record, statusList, type Tally } from "./tally.js";
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

interface Bot {
  id: string;
  token: string;
}

/**
 * One token's checks sent to the API replicas in turn until every replica has refused one with 429.
 * A 200 with RateLimit-Remaining was counted in the window; one without it is the limiter failing
 * open (Redis slower than its deadline, or down: the spec lets the request through). One window
 * shared by the replicas never gives two answers the same RateLimit-Remaining; a window per replica
 * gives each value twice and 1,200 counted 200s.
 */
export interface LimitProbe {
  label: string;
  /** 200 answers that carried RateLimit-Remaining (counted in the window). */
  counted: number;
  /** 200 answers without it (fail-open). */
  failedOpen: number;
  /** RateLimit-Remaining values that two answers carried. */
  repeatedRemaining: number;
  /** Per replica: the answer number of its first 429 (null: none). */
  firstRefusal: Map<string, number | null>;
  /** Other answers (5xx, connection failures). */
  other: string[];
  ms: number;
}

/**
 * The old token's checks, sent to each API replica one after another from the rotation's answer
 * for ROTATION_WATCH_MS. Times are when a request was sent, relative to the rotation's answer: a
 * request sent after the refusal took effect is refused, however long its answer takes to come.
 */
export interface RotationProbe {
  label: string;
  /** Per API replica: send time of the first request refused with 401 (null: none). */
  firstRefusedMs: Map<string, number | null>;
  /** Per API replica: send time of the last request still accepted (null: none after the rotation). */
  lastAcceptedMs: Map<string, number | null>;
  /** Anything else wrong: the token before the rotation refused, the new one refused, other answers. */
  problems: string[];
}

export interface Fault {
  what: string;
  at: number;
  ms: number;
  note?: string;
}

export interface Figures {
  votes: Tally;
  checks: Tally;
  stats: Tally;
  /** Check answers for a user whose vote was answered 201 that said "not voted". */
  checkMismatches: number;
  accepted: number;
  delivered: number;
  undelivered: string[];
  /** Receipts beyond the first of a delivery id. */
  duplicates: number;
  /** Duplicates by the last fault before the repeated receipt. */
  duplicatesByPhase: Map<string, number>;
  /** Receipts of repeated deliveries beyond the attempts PostgreSQL recorded for them. */
  unrecordedRepeats: number;
  /** Error kinds of the failed attempts PostgreSQL recorded for repeated deliveries. */
  failedKinds: Map<string, number>;
  /** Median time from a delivery's first receipt to its repeat. */
  repeatGapMedianMs: number;
  distinctDeliveries: number;
  lastDeliveryAfterLoadMs: number;
  /** How long the suite waited for deliveries after the load. */
  deliveryWaitMs: number;
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

/** A limit probe stops after this long (well inside the 60 s window it probes). */
const LIMIT_PROBE_MS = 45_000;
/**
 * Requests of one kind in flight at most (5 s of votes): beyond it the stack is not keeping up and
 * sends are skipped. Below it the load stays open-loop through a stall of a few seconds (a fault).
 */
const MAX_IN_FLIGHT = 1_500;
/** How long the old token is tried after a rotation; it must be refused from 1 s on. */
const ROTATION_WATCH_MS = 1_500;

const json = (outcome: Outcome): unknown => {
  if (outcome.kind !== "answered") return undefined;
  try {
    return JSON.parse(outcome.body);
  } catch {
    return undefined;
  }
};

const describe = (outcome: Outcome): string =>
  outcome.kind === "answered" ? `${outcome.status} ${outcome.body.slice(0, 200)}` : outcome.kind;

async function must(outcome: Promise<Outcome>, status: number, what: string): Promise<unknown> {
  const answer = await outcome;
  if (answer.kind !== "answered" || answer.status !== status)
    throw new Error(`${what}: expected ${status}, got ${describe(answer)}`);
  return json(answer);
}

export async function runScenario(topology: Topology, options: ScenarioOptions): Promise<Figures> {
  const { log } = options;
  const internal = { authorization: topology.keys.internalKey };
  const api = createBalancer({ readinessPath: "/readyz", pollMs: 200 });
  const ingest = createBalancer({ readinessPath: "/readyz", pollMs: 200 });
  const live = new Map<string, Replica>();
  const enter = (balancer: Balancer, replica: Replica) => {
    live.set(replica.name, replica);
    balancer.add(replica.name, replica.process.base);
  };

  log("starting 2 api, 2 vote-ingest and 3 webhook-dispatcher replicas from dist/");
  const started = await Promise.all([
    topology.start("api"),
    topology.start("api"),
    topology.start("vote-ingest"),
    topology.start("vote-ingest"),
    topology.start("webhook-dispatcher"),
    topology.start("webhook-dispatcher"),
    topology.start("webhook-dispatcher"),
  ]);
  for (const r of started) {
    if (r.name.startsWith("api")) enter(api, r);
    else if (r.name.startsWith("ingest")) enter(ingest, r);
    else live.set(r.name, r);
  }

  try {
    // Bots through the management endpoints, as the site does: create approved, token, webhook.
    const newBot = async (webhook: boolean): Promise<Bot> => {
      const id = randomBotId();
      await must(
        ingest.request({
          method: "POST",
          path: "/internal/v1/bots",
          headers: internal,
          body: { id, approve: true },
        }),
        201,
        "create bot",
      );
      const token = (await must(
        ingest.request({ method: "POST", path: `/internal/v1/bots/${id}/token`, headers: internal }),
        200,
        "token",
      )) as { token: string };
      if (webhook) {
        await must(
          ingest.request({
            method: "PUT",
            path: `/internal/v1/bots/${id}/webhook`,
            headers: internal,
            body: { url: topology.receiver.url(`/hook/${id}`) },
          }),
          200,
          "set webhook",
        );
      }
      return { id, token: token.token };
    };
    const bots: Bot[] = [];
    for (let i = 0; i < options.webhookBots; i++) bots.push(await newBot(true));
    const limitBots = [await newBot(false), await newBot(false)];
    const rotationBots = [await newBot(false), await newBot(false)];
    log(`${bots.length} bots with webhooks on the receiver, 4 probe bots`);

    // ---- load ----
    const votes = newTally();
    const checks = newTally();
    const stats = newTally();
    const accepted = new Map<string, number>(); // `${bot}:${user}` -> when answered
    const acceptedList: { bot: Bot; user: string }[] = [];
    let checkMismatches = 0;
    const loadStart = Date.now();
    const loadAverageAtStart = loadavg()[0] ?? 0;
    const lag = monitorEventLoopDelay({ resolution: 20 });
    lag.enable();
    const now = () => Date.now() - loadStart;
    let redisDown: { from: number; to: number } | undefined;
    const outage = { apiServerErrors: 0, votes: new Map<number, number>(), votesFailed: 0 };
    const inOutage = (at: number) => redisDown !== undefined && at >= redisDown.from && at <= redisDown.to;

    const inFlight = { votes: 0, checks: 0, stats: 0 };
    const fire = (
      kind: keyof typeof inFlight,
      tally: Tally,
      balancer: Balancer,
      spec: RequestSpec,
      then?: (outcome: Outcome, sentAt: number) => void,
    ) => {
      if (inFlight[kind] >= MAX_IN_FLIGHT) {
        tally.skipped++;
        tally.skippedAt.push(now());
        return;
      }
      inFlight[kind]++;
      const sentAt = now();
      void balancer.request(spec).then((outcome) => {
        inFlight[kind]--;
        record(tally, outcome, sentAt);
        then?.(outcome, sentAt);
      });
    };
    let voteSeq = 0;
    const sendVote = () => {
      const bot = bots[voteSeq++ % bots.length] as Bot;
      const user = randomUserId();
      fire(
        "votes",
        votes,
        ingest,
        {
          method: "POST",
          path: "/internal/v1/votes",
          headers: internal,
          body: { bot_id: bot.id, user_id: user },
        },
        (outcome, sentAt) => {
          const during = inOutage(sentAt);
          if (outcome.kind === "answered") {
            if (during) outage.votes.set(outcome.status, (outage.votes.get(outcome.status) ?? 0) + 1);
            if (outcome.status === 201) {
              accepted.set(`${bot.id}:${user}`, now());
              acceptedList.push({ bot, user });
            }
          } else if (during) outage.votesFailed++;
        },
      );
    };
    let checkSeq = 0;
    const sendCheck = () => {
      // Half the checks ask about a user whose vote was answered 201: any replica must say voted.
      const known = checkSeq++ % 2 === 0 && acceptedList.length > 0;
      const pick = known ? acceptedList[Math.floor(Math.random() * acceptedList.length)] : undefined;
      const bot = pick?.bot ?? (bots[checkSeq % bots.length] as Bot);
      const user = pick?.user ?? randomUserId();
      fire(
        "checks",
        checks,
        api,
        {
          method: "GET",
          path: `/api/v1/bots/${bot.id}/check?userId=${user}`,
          headers: { authorization: bot.token },
        },
        (outcome, sentAt) => {
          if (outcome.kind === "answered" && outcome.status >= 500 && inOutage(sentAt))
            outage.apiServerErrors++;
          if (pick && outcome.kind === "answered" && outcome.status === 200) {
            if ((json(outcome) as { hasVoted?: boolean }).hasVoted !== true) checkMismatches++;
          }
        },
      );
    };
    let statsSeq = 0;
    const sendStats = () => {
      const bot = bots[statsSeq++ % bots.length] as Bot;
      fire(
        "stats",
        stats,
        api,
        {
          method: "POST",
          path: `/api/v1/bots/${bot.id}/stats`,
          headers: { authorization: bot.token },
          body: { server_count: 1000 + statsSeq },
        },
        (outcome, sentAt) => {
          if (outcome.kind === "answered" && outcome.status >= 500 && inOutage(sentAt))
            outage.apiServerErrors++;
        },
      );
    };

    // Open-loop pacing: every tick sends what the rates say is due by now.
    let loadRunning = true;
    const sentBy = { votes: 0, checks: 0, stats: 0 };
    const pacer = (async () => {
      while (loadRunning) {
        const seconds = now() / 1000;
        while (sentBy.votes < seconds * options.votesPerSecond) {
          sentBy.votes++;
          sendVote();
        }
        while (sentBy.checks < seconds * options.checksPerSecond) {
          sentBy.checks++;
          sendCheck();
        }
        while (sentBy.stats < seconds * options.statsPerSecond) {
          sentBy.stats++;
          sendStats();
        }
        await sleep(10);
      }
    })();

    // ---- probes and faults, in order, while the load runs ----
    const faults: Fault[] = [];
    const limitProbes: LimitProbe[] = [];
    const rotationProbes: RotationProbe[] = [];
    const apiExitCodes: (number | null)[] = [];
    const at = async (ms: number) => {
      while (now() < ms) await sleep(20);
    };
    const apiNames = () => [...live.keys()].filter((n) => n.startsWith("api"));

    const limitProbe = async (label: string, bot: Bot) => {
      const names = apiNames();
      const startedAt = Date.now();
      const firstRefusal = new Map<string, number | null>(names.map((n) => [n, null]));
      const remainingSeen = new Set<string>();
      const probe: LimitProbe = {
        label,
        counted: 0,
        failedOpen: 0,
        repeatedRemaining: 0,
        firstRefusal,
        other: [],
        ms: 0,
      };
      let n = 0;
      const refusedEverywhere = () => [...firstRefusal.values()].every((v) => v !== null);
      await Promise.all(
        // Many at once: under load an answer can take seconds, and the probe must end in the window.
        Array.from({ length: 64 }, async () => {
          while (!refusedEverywhere() && n < 1_000 && Date.now() - startedAt < LIMIT_PROBE_MS) {
            const i = n++;
            const name = names[i % names.length] as string;
            const outcome = await api.requestTo(name, {
              method: "GET",
              path: `/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`,
              headers: { authorization: bot.token },
            });
            if (outcome.kind !== "answered" || (outcome.status !== 200 && outcome.status !== 429)) {
              probe.other.push(`${name}: ${describe(outcome)}`);
            } else if (outcome.status === 429) {
              if (firstRefusal.get(name) === null) firstRefusal.set(name, i + 1);
            } else {
              const remaining = outcome.headers["ratelimit-remaining"];
              if (typeof remaining !== "string") probe.failedOpen++;
              else {
                probe.counted++;
                if (remainingSeen.has(remaining)) probe.repeatedRemaining++;
                remainingSeen.add(remaining);
              }
            }
          }
        }),
      );
      probe.ms = Date.now() - startedAt;
      limitProbes.push(probe);
      log(
        `${label}: ${probe.counted} counted 200s, ${probe.failedOpen} failed open, first 429 at ${[...firstRefusal].map(([r, i]) => `${r} #${i ?? "never"}`).join(", ")}; ${probe.repeatedRemaining} repeated RateLimit-Remaining; ${probe.ms} ms`,
      );
    };

    const rotationProbe = async (label: string, bot: Bot) => {
      const names = apiNames();
      const check = (name: string, token: string) =>
        api.requestTo(name, {
          method: "GET",
          path: `/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`,
          headers: { authorization: token },
        });
      const problems: string[] = [];
      for (const name of names) {
        const before = await check(name, bot.token);
        if (before.kind !== "answered" || before.status !== 200)
          problems.push(`${name}: the token before the rotation got ${describe(before)}`);
      }
      const rotated = (await must(
        ingest.request({ method: "POST", path: `/internal/v1/bots/${bot.id}/token`, headers: internal }),
        200,
        "rotate token",
      )) as { token: string };
      const rotatedAt = Date.now();
      const firstRefusedMs = new Map<string, number | null>();
      const lastAcceptedMs = new Map<string, number | null>();
      await Promise.all(
        names.map(async (name) => {
          firstRefusedMs.set(name, null);
          lastAcceptedMs.set(name, null);
          for (;;) {
            const sentMs = Date.now() - rotatedAt;
            if (sentMs > ROTATION_WATCH_MS) break;
            const outcome = await check(name, bot.token);
            if (outcome.kind === "answered" && outcome.status === 401) {
              if (firstRefusedMs.get(name) === null) firstRefusedMs.set(name, sentMs);
            } else if (outcome.kind === "answered" && outcome.status === 200)
              lastAcceptedMs.set(name, sentMs);
            else problems.push(`${name}: the old token got ${describe(outcome)}`);
            await sleep(10);
          }
          const fresh = await check(name, rotated.token);
          if (fresh.kind !== "answered" || fresh.status !== 200)
            problems.push(`${name}: the new token got ${describe(fresh)}`);
        }),
      );
      bot.token = rotated.token;
      rotationProbes.push({ label, firstRefusedMs, lastAcceptedMs, problems });
      log(
        `${label}: old token ${names.map((n) => `${n}: last accepted when sent at ${lastAcceptedMs.get(n) ?? "-"} ms, first refused when sent at ${firstRefusedMs.get(n) ?? "never"} ms`).join("; ")}${problems.length ? `; ${problems.slice(0, 3).join("; ")}` : ""}`,
      );
    };

    const fault = async (what: string, action: () => Promise<string | undefined>) => {
      const from = now();
      const note = await action();
      faults.push({ what, at: from, ms: now() - from, ...(note ? { note } : {}) });
      log(`${what} at ${(from / 1000).toFixed(1)} s took ${now() - from} ms${note ? ` (${note})` : ""}`);
    };

    const timeline = (async () => {
      await at(3_000);
      await limitProbe("limit probe 1", limitBots[0] as Bot);
      await rotationProbe("rotation probe 1", rotationBots[0] as Bot);

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
      for (const old of apiNames()) {
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
      await limitProbe("limit probe 2", limitBots[1] as Bot);
      await rotationProbe("rotation probe 2", rotationBots[1] as Bot);
    })();

    // The load runs its full length and until the timeline is through.
    let timelineError: unknown;
    await Promise.all([timeline.catch((error) => (timelineError = error)), at(options.loadMs)]);
    loadRunning = false;
    await pacer;
    const loadSeconds = now() / 1000;
    lag.disable();
    const loadAverage: [number, number] = [loadAverageAtStart, loadavg()[0] ?? 0];
    const loadEnd = Date.now();
    log(
      `load done after ${loadSeconds.toFixed(1)} s: votes ${statusList(votes)}; checks ${statusList(checks)}; stats ${statusList(stats)}`,
    );
    // Requests still in flight.
    while (inFlight.votes + inFlight.checks + inFlight.stats > 0 && Date.now() - loadEnd < 15_000)
      await sleep(50);
    if (timelineError) throw timelineError;

    // ---- deliveries ----
    const seen = new Map<string, number>(); // delivery id -> receipts
    const duplicatesByPhase = new Map<string, number>();
    const firstReceipt = new Map<string, number>();
    const repeatGapsMs: number[] = [];
    const deliveredVotes = new Set<string>();
    let cursor = 0;
    let lastReceiptAt = 0;
    const absorb = () => {
      const requests = topology.receiver.requests;
      for (; cursor < requests.length; cursor++) {
        const request = requests[cursor];
        if (!request) continue;
        const id = String(request.headers["x-webhook-delivery"] ?? "");
        const receipts = (seen.get(id) ?? 0) + 1;
        seen.set(id, receipts);
        if (receipts > 1) {
          repeatGapsMs.push(request.at - (firstReceipt.get(id) ?? request.at));
          // Which fault the repeat followed.
          const at = request.at - loadStart;
          const after = faults.filter((f) => f.at <= at).at(-1)?.what ?? "before any fault";
          duplicatesByPhase.set(after, (duplicatesByPhase.get(after) ?? 0) + 1);
        } else firstReceipt.set(id, request.at);
        lastReceiptAt = request.at;
        try {
          const body = JSON.parse(request.body.toString()) as { bot_id: string; user_id: string };
          deliveredVotes.add(`${body.bot_id}:${body.user_id}`);
        } catch {
          // An unreadable body is not a delivery of any accepted vote: it stays undelivered.
        }
      }
    };
    const missing = () => [...accepted.keys()].filter((key) => !deliveredVotes.has(key));
    const deadline = Math.min(Date.now() + options.deliveryDeadlineMs, options.finishBy);
    absorb();
    while (missing().length > 0 && Date.now() < deadline) {
      await sleep(250);
      absorb();
    }
    const allDeliveredAt = Date.now();
    // Late duplicates (a job run twice after its delivery) still count.
    await sleep(Math.min(2_000, Math.max(0, deadline - Date.now())));
    absorb();
    const undelivered = missing();
    log(
      `deliveries: ${accepted.size - undelivered.length} of ${accepted.size} accepted votes, ${undelivered.length === 0 ? `all by ${((allDeliveredAt - loadEnd) / 1000).toFixed(1)} s after the load` : `${undelivered.length} missing at the deadline`}`,
    );

    let duplicates = 0;
    for (const n of seen.values()) duplicates += n - 1;
    // What PostgreSQL knows of the repeated deliveries: a repeat after a recorded failed attempt
    // (the receiver got a request the dispatcher took for failed: a retry by design), or a receipt
    // with no recorded attempt behind it (sent, and its result never recorded).
    const repeated = [...seen].filter(([, n]) => n > 1);
    const recorded = await topology.recordedAttempts(repeated.map(([id]) => id));
    let unrecordedRepeats = 0;
    const failedKinds = new Map<string, number>();
    for (const [id, n] of repeated) {
      const attempts = recorded.get(id) ?? [];
      unrecordedRepeats += Math.max(0, n - attempts.length);
      for (const kind of attempts) if (kind !== null) failedKinds.set(kind, (failedKinds.get(kind) ?? 0) + 1);
    }
    return {
      votes,
      checks,
      stats,
      checkMismatches,
      accepted: accepted.size,
      delivered: accepted.size - undelivered.length,
      undelivered,
      duplicates,
      duplicatesByPhase,
      unrecordedRepeats,
      failedKinds,
      repeatGapMedianMs: repeatGapsMs.sort((a, b) => a - b)[Math.floor(repeatGapsMs.length / 2)] ?? 0,
      distinctDeliveries: seen.size,
      lastDeliveryAfterLoadMs: Math.max(0, lastReceiptAt - loadEnd),
      deliveryWaitMs: allDeliveredAt - loadEnd,
      limitProbes,
      rotationProbes,
      faults,
      redisOutage: outage,
      apiExitCodes,
      loadSeconds,
      loadAverage,
      clientLagP99Ms: lag.percentile(99) / 1e6,
    };
  } finally {
    api.close();
    ingest.close();
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
    if (probe.counted > 600)
      out.push(
        `${probe.label}: ${probe.counted} checks of one token were counted and allowed in one window (limit 600)`,
      );
    if (probe.repeatedRemaining > 0)
      out.push(
        `${probe.label}: ${probe.repeatedRemaining} answers repeated another's RateLimit-Remaining (the replicas do not share the window)`,
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
