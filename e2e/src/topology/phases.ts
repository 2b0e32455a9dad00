/**
 * The phases of a run against the topology's replicas, shared by the topology suite (scenario.ts)
 * and the failover suite (failover.ts): the fleet (replicas behind balancers), the bots, the
 * open-loop load (votes through the ingest replicas, checks and stats posts through the API
 * replicas) with observers of every answer, the probes of the shared rate limit and of token
 * rotation, faults timed against the load, and the tally of deliveries once the load is over.
 */
import { spawnSync } from "node:child_process";
import { loadavg } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { randomBotId, randomUserId } from "@botdir/db/testing";
import { DEFAULT_LIMITS } from "../../../apps/api/src/services/ratelimit.js";
import type { AppName } from "../processes.js";
import { REPO_ROOT, sleep } from "../processes.js";
import { type Balancer, createBalancer, type Outcome, type RequestSpec } from "./balancer.js";
import { newTally, record, type Tally } from "./tally.js";
import type { Replica, Topology } from "./topology.js";

export interface Bot {
  id: string;
  token: string;
}

/**
 * One token's checks sent to the API replicas in turn until every replica has refused one with 429.
 * A 200 with RateLimit-Remaining was counted: in the shared window (RateLimit-Limit 600), or by the
 * replica alone (its share, 300: Redis failed or answered after the limiter's deadline); one
 * without it is the limiter failing open (the spec's last resort). One window shared by the
 * replicas never gives two of its answers the same RateLimit-Remaining; a window per replica gives
 * each value twice and 1,200 counted 200s.
 */
export interface LimitProbe {
  label: string;
  /** 200 answers that carried RateLimit-Remaining (counted in the window). */
  counted: number;
  /** 200 answers without it (fail-open). */
  failedOpen: number;
  /** RateLimit-Remaining values that two answers of the shared window carried. */
  repeatedRemaining: number;
  /** Per replica: the answer number of its first 429 (null: none). */
  firstRefusal: Map<string, number | null>;
  /** Other answers (5xx, connection failures). */
  other: string[];
  /** 200 answers counted by a replica alone (RateLimit-Limit its local share, not the limit). */
  local: number;
  /**
   * 429 answers of the shared window (RateLimit-Limit the limit): Redis had counted past the
   * limit, so every one of the limit's increments before them belongs to a request answered 200,
   * counted there or (a count Redis executed after the limiter gave up on it) counted locally or
   * failed open.
   */
  sharedRefusals: number;
  /** How long the probe waited for every replica's limiter to count on Redis before it began. */
  waitedMs: number;
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

/** A limit probe stops after this long (well inside the 60 s window it probes). */
const LIMIT_PROBE_MS = 45_000;
/**
 * Requests of one kind in flight at most (5 s of votes): beyond it the stack is not keeping up and
 * sends are skipped. Below it the load stays open-loop through a stall of a few seconds (a fault).
 */
/**
 * The apps' production bundles, as the suites run them (`turbo run build`); false when the build
 * failed (its errors are on stderr).
 */
export function buildApps(log: (line: string) => void): boolean {
  log("building the apps (turbo run build)");
  const built = spawnSync("pnpm", ["exec", "turbo", "run", "build", "--output-logs=errors-only"], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "inherit", "inherit"],
  });
  return built.status === 0;
}

export const MAX_IN_FLIGHT = 1_500;
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

/** The replicas that run, the API's and vote-ingest's behind their balancers. */
export interface Fleet {
  api: Balancer;
  ingest: Balancer;
  live: Map<string, Replica>;
  /** Puts a replica in `balancer`'s rotation (and the live set). */
  enter(balancer: Balancer, replica: Replica): void;
  apiNames(): string[];
  internal: { authorization: string };
  close(): void;
}

/** Starts the replicas (at once) and puts them behind balancers polling /readyz every 200 ms. */
export async function startFleet(
  topology: Topology,
  counts: Record<AppName, number>,
  log: (line: string) => void,
): Promise<Fleet> {
  const api = createBalancer({ readinessPath: "/readyz", pollMs: 200 });
  const ingest = createBalancer({ readinessPath: "/readyz", pollMs: 200 });
  const live = new Map<string, Replica>();
  const enter = (balancer: Balancer, replica: Replica) => {
    live.set(replica.name, replica);
    balancer.add(replica.name, replica.process.base);
  };
  log(
    `starting ${counts.api} api, ${counts["vote-ingest"]} vote-ingest and ${counts["webhook-dispatcher"]} webhook-dispatcher replicas from dist/`,
  );
  const apps = (Object.keys(counts) as AppName[]).flatMap((app) =>
    Array.from({ length: counts[app] }, () => app),
  );
  try {
    const started = await Promise.all(apps.map((app) => topology.start(app)));
    for (const r of started) {
      if (r.name.startsWith("api")) enter(api, r);
      else if (r.name.startsWith("ingest")) enter(ingest, r);
      else live.set(r.name, r);
    }
  } catch (error) {
    api.close();
    ingest.close();
    throw error;
  }
  return {
    api,
    ingest,
    live,
    enter,
    apiNames: () => [...live.keys()].filter((n) => n.startsWith("api")),
    internal: { authorization: topology.keys.internalKey },
    close() {
      api.close();
      ingest.close();
    },
  };
}

/** A bot through the management endpoints, as the site makes one: approved, a token, a webhook. */
export async function createBot(fleet: Fleet, topology: Topology, webhook: boolean): Promise<Bot> {
  const { ingest, internal } = fleet;
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
}

export type RequestKind = "votes" | "checks" | "stats";

/** Told of every answer (or failure) of the load: its kind, outcome, when sent and when it came, what was sent. */
export type Observer = (
  kind: RequestKind,
  outcome: Outcome,
  sentAt: number,
  answeredAt: number,
  spec: RequestSpec,
) => void;

export interface LoadOptions {
  votesPerSecond: number;
  checksPerSecond: number;
  statsPerSecond: number;
}

export interface LoadEnd {
  loadSeconds: number;
  /** The machine's 1-minute load average when the load started and when it ended. */
  loadAverage: [number, number];
  /** Epoch ms when the load stopped sending. */
  loadEnd: number;
  /** p99 event-loop delay of this process (client and receiver) during the load, ms. */
  clientLagP99Ms: number;
}

export interface Load {
  votes: Tally;
  checks: Tally;
  stats: Tally;
  /** `${bot}:${user}` of every vote answered 201 → ms from the load's start. */
  accepted: Map<string, number>;
  /** Check answers for a user whose vote was answered 201 that said "not voted". */
  checkMismatches(): number;
  /** Epoch ms when the load started. */
  loadStart: number;
  /** Ms since the load started. */
  now(): number;
  /** Resolves once `ms` have passed since the load started. */
  at(ms: number): Promise<void>;
  /** Adds an observer of every answer from now on; returns its removal. */
  observe(observer: Observer): () => void;
  /** Stops sending, waits (15 s at most) for the requests in flight. */
  stop(): Promise<LoadEnd>;
}

/**
 * Open-loop load at the rates of `options` (every 10 ms tick sends what is due), votes spread over
 * `bots`; half the checks ask about a user whose vote was answered 201 (any replica must say so).
 */
export function startLoad(fleet: Fleet, bots: Bot[], options: LoadOptions): Load {
  const { api, ingest, internal } = fleet;
  const votes = newTally();
  const checks = newTally();
  const stats = newTally();
  const accepted = new Map<string, number>();
  const acceptedList: { bot: Bot; user: string }[] = [];
  const observers = new Set<Observer>();
  let checkMismatches = 0;
  const loadStart = Date.now();
  const loadAverageAtStart = loadavg()[0] ?? 0;
  const lag = monitorEventLoopDelay({ resolution: 20 });
  lag.enable();
  const now = () => Date.now() - loadStart;

  const inFlight = { votes: 0, checks: 0, stats: 0 };
  const fire = (
    kind: RequestKind,
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
      const answeredAt = now();
      for (const observer of observers) observer(kind, outcome, sentAt, answeredAt, spec);
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
      (outcome) => {
        if (outcome.kind === "answered" && outcome.status === 201) {
          accepted.set(`${bot.id}:${user}`, now());
          acceptedList.push({ bot, user });
        }
      },
    );
  };
  let checkSeq = 0;
  const sendCheck = () => {
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
      (outcome) => {
        if (pick && outcome.kind === "answered" && outcome.status === 200) {
          if ((json(outcome) as { hasVoted?: boolean }).hasVoted !== true) checkMismatches++;
        }
      },
    );
  };
  let statsSeq = 0;
  const sendStats = () => {
    const bot = bots[statsSeq++ % bots.length] as Bot;
    fire("stats", stats, api, {
      method: "POST",
      path: `/api/v1/bots/${bot.id}/stats`,
      headers: { authorization: bot.token },
      body: { server_count: 1000 + statsSeq },
    });
  };

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

  return {
    votes,
    checks,
    stats,
    accepted,
    checkMismatches: () => checkMismatches,
    loadStart,
    now,
    async at(ms) {
      while (now() < ms) await sleep(20);
    },
    observe(observer) {
      observers.add(observer);
      return () => observers.delete(observer);
    },
    async stop() {
      loadRunning = false;
      await pacer;
      const loadSeconds = now() / 1000;
      lag.disable();
      const loadAverage: [number, number] = [loadAverageAtStart, loadavg()[0] ?? 0];
      const loadEnd = Date.now();
      while (inFlight.votes + inFlight.checks + inFlight.stats > 0 && Date.now() - loadEnd < 15_000)
        await sleep(50);
      return { loadSeconds, loadAverage, loadEnd, clientLagP99Ms: lag.percentile(99) / 1e6 };
    },
  };
}

/** `/check`'s limit per token and minute (the spec's): an answer with another was counted locally. */
export const CHECK_LIMIT = DEFAULT_LIMITS.check;

/** `GET /check` of `botId` for a new user, with `token`. */
const checkRequest = (botId: string, token: string): RequestSpec => ({
  method: "GET",
  path: `/api/v1/bots/${botId}/check?userId=${randomUserId()}`,
  headers: { authorization: token },
});
/** How long a limit probe waits for the replicas' limiters to count on Redis again. */
const LIMITER_BACK_MS = 30_000;
/** Answers in a row, per replica, counted on Redis that say its limiter is back there. */
const LIMITER_BACK_STREAK = 5;

/**
 * Waits until every API replica counts `/check` on Redis again: LIMITER_BACK_STREAK answers in a
 * row from each carry the shared limit (a replica counting alone, after a Redis fault, answers with
 * its local share). `bot` is a scratch token: its window is spent, not the probe's. Returns the
 * milliseconds waited; at the deadline it returns anyway and the probe's figures tell what followed.
 */
async function limiterBackOnRedis(fleet: Fleet, bot: Bot, log: (line: string) => void): Promise<number> {
  const startedAt = Date.now();
  const streak = new Map<string, number>(fleet.apiNames().map((n) => [n, 0]));
  const back = () => [...streak.values()].every((n) => n >= LIMITER_BACK_STREAK);
  let sent = 0;
  while (!back() && Date.now() - startedAt < LIMITER_BACK_MS && sent < 500) {
    await Promise.all(
      [...streak.keys()].map(async (name) => {
        sent++;
        const outcome = await fleet.api.requestTo(name, checkRequest(bot.id, bot.token));
        const onRedis =
          outcome.kind === "answered" &&
          (outcome.status === 200 || outcome.status === 429) &&
          outcome.headers["ratelimit-limit"] === String(CHECK_LIMIT);
        streak.set(name, onRedis ? (streak.get(name) ?? 0) + 1 : 0);
      }),
    );
  }
  const waited = Date.now() - startedAt;
  if (!back())
    log(
      `limiter not back on Redis on every replica after ${waited} ms (${sent} scratch checks); probing anyway`,
    );
  return waited;
}

/**
 * One token's checks sent to every API replica in turn until each has refused one with 429 (see
 * LimitProbe), once every replica's limiter counts on Redis (checks of `scratch`, see
 * limiterBackOnRedis): the probe tests the shared window, not the fallback a Redis fault left.
 */
export async function limitProbe(
  fleet: Fleet,
  label: string,
  bot: Bot,
  scratch: Bot,
  log: (line: string) => void,
): Promise<LimitProbe> {
  const { api } = fleet;
  const names = fleet.apiNames();
  const waitedMs = await limiterBackOnRedis(fleet, scratch, log);
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
    local: 0,
    sharedRefusals: 0,
    waitedMs,
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
        const outcome = await api.requestTo(name, checkRequest(bot.id, bot.token));
        if (outcome.kind !== "answered" || (outcome.status !== 200 && outcome.status !== 429)) {
          probe.other.push(`${name}: ${describe(outcome)}`);
        } else if (outcome.status === 429) {
          if (firstRefusal.get(name) === null) firstRefusal.set(name, i + 1);
          if (outcome.headers["ratelimit-limit"] === String(CHECK_LIMIT)) probe.sharedRefusals++;
        } else {
          const remaining = outcome.headers["ratelimit-remaining"];
          if (typeof remaining !== "string") probe.failedOpen++;
          else {
            probe.counted++;
            // A replica's local count (its share, API_REPLICAS) has values of its own.
            if (outcome.headers["ratelimit-limit"] !== String(CHECK_LIMIT)) probe.local++;
            else {
              if (remainingSeen.has(remaining)) probe.repeatedRemaining++;
              remainingSeen.add(remaining);
            }
          }
        }
      }
    }),
  );
  probe.ms = Date.now() - startedAt;
  log(
    `${label} (after ${waitedMs} ms for the limiters on Redis): ${probe.counted} counted 200s (${probe.local} by a replica alone), ${probe.failedOpen} failed open, first 429 at ${[...firstRefusal].map(([r, i]) => `${r} #${i ?? "never"}`).join(", ")} (${probe.sharedRefusals} 429s of the shared window); ${probe.repeatedRemaining} repeated RateLimit-Remaining; ${probe.ms} ms`,
  );
  return probe;
}

/** A token rotated through vote-ingest while its old token is tried on every API replica (see RotationProbe). */
export async function rotationProbe(
  fleet: Fleet,
  label: string,
  bot: Bot,
  log: (line: string) => void,
): Promise<RotationProbe> {
  const { api, ingest, internal } = fleet;
  const names = fleet.apiNames();
  const check = (name: string, token: string) => api.requestTo(name, checkRequest(bot.id, token));
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
        } else if (outcome.kind === "answered" && outcome.status === 200) lastAcceptedMs.set(name, sentMs);
        else problems.push(`${name}: the old token got ${describe(outcome)}`);
        await sleep(10);
      }
      const fresh = await check(name, rotated.token);
      if (fresh.kind !== "answered" || fresh.status !== 200)
        problems.push(`${name}: the new token got ${describe(fresh)}`);
    }),
  );
  bot.token = rotated.token;
  log(
    `${label}: old token ${names.map((n) => `${n}: last accepted when sent at ${lastAcceptedMs.get(n) ?? "-"} ms, first refused when sent at ${firstRefusedMs.get(n) ?? "never"} ms`).join("; ")}${problems.length ? `; ${problems.slice(0, 3).join("; ")}` : ""}`,
  );
  return { label, firstRefusedMs, lastAcceptedMs, problems };
}

/** Faults timed against the load: each one's start, duration and note, logged as it ends. */
export function faultRunner(
  load: Load,
  log: (line: string) => void,
): { faults: Fault[]; fault(what: string, action: () => Promise<string | undefined>): Promise<void> } {
  const faults: Fault[] = [];
  return {
    faults,
    async fault(what, action) {
      const from = load.now();
      const note = await action();
      faults.push({ what, at: from, ms: load.now() - from, ...(note ? { note } : {}) });
      log(`${what} at ${(from / 1000).toFixed(1)} s took ${load.now() - from} ms${note ? ` (${note})` : ""}`);
    },
  };
}

/** What the receiver got of the votes answered 201. */
export interface Deliveries {
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
}

/**
 * Waits (until `deadlineMs` after the load, and never past `finishBy`) for every vote answered 201
 * to reach the receiver, then counts repeats and asks PostgreSQL which attempts it recorded for them.
 */
export async function tallyDeliveries(
  topology: Topology,
  load: Load,
  loadEnd: number,
  faults: Fault[],
  options: { deadlineMs: number; finishBy: number },
  log: (line: string) => void,
): Promise<Deliveries> {
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
        const at = request.at - load.loadStart;
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
  const missing = () => [...load.accepted.keys()].filter((key) => !deliveredVotes.has(key));
  const deadline = Math.min(Date.now() + options.deadlineMs, options.finishBy);
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
    `deliveries: ${load.accepted.size - undelivered.length} of ${load.accepted.size} accepted votes, ${undelivered.length === 0 ? `all by ${((allDeliveredAt - loadEnd) / 1000).toFixed(1)} s after the load` : `${undelivered.length} missing at the deadline`}`,
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
    accepted: load.accepted.size,
    delivered: load.accepted.size - undelivered.length,
    undelivered,
    duplicates,
    duplicatesByPhase,
    unrecordedRepeats,
    failedKinds,
    repeatGapMedianMs: repeatGapsMs.sort((a, b) => a - b)[Math.floor(repeatGapsMs.length / 2)] ?? 0,
    distinctDeliveries: seen.size,
    lastDeliveryAfterLoadMs: Math.max(0, lastReceiptAt - loadEnd),
    deliveryWaitMs: allDeliveredAt - loadEnd,
  };
}
