/**
 * The rolling-restart scenario of the topology suite, run N times in a row: two API replicas take
 * `/check` from 8 keep-alive workers (each sends its next request as soon as the last is
 * answered), directly over the replicas' keep-alive pools or through the suite's balancer (see
 * RestartOptions.client), with two CPU hogs
 * (`node -e 'for(;;){}'`) beside them for the whole scenario. Each run starts a new API replica,
 * lets it take load, then SIGTERMs the oldest one and waits for its exit. A request that was reset
 * (ECONNRESET, socket hang up, EPIPE) is a request the replica had accepted and never answered:
 * any one fails the scenario, and so do a timeout, an answer other than 200, 429 (a token past its
 * limit) or a 500 with `Retry-After` (counted and printed), and an exit code other than 0. A
 * refused connection is tried on the other replica.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { sleep } from "../processes.js";
import type { Outcome, RequestSpec } from "./balancer.js";
import { type Bot, createBot, type Fleet, startFleet } from "./phases.js";
import type { Replica, Topology } from "./topology.js";

export interface RestartOptions {
  runs: number;
  /** Keep-alive workers sending `/check` in a closed loop. */
  workers: number;
  /** CPU-bound processes beside the replicas for the scenario's duration. */
  hogs: number;
  /**
   * `balancer`: through the suite's balancer, which stops sending to a replica once its `/readyz`
   * says 503. `direct`: round robin over the replicas' keep-alive pools with no readiness (a
   * client with a static list of addresses), so requests reach the stopping replica until its
   * connections are refused; a refused connection is tried on the next replica.
   */
  client: "balancer" | "direct";
  log(line: string): void;
}

export interface RestartRun {
  victim: string;
  exitCode: number | null;
  /** From SIGTERM to the process's exit, ms. */
  stopMs: number;
  answered: number;
  /** Requests reset on a keep-alive connection / on a new connection. */
  resetsReused: number;
  resetsNew: number;
  refused: number;
  timeouts: number;
  /**
   * 500s with `Retry-After` (a store slower than its deadline on a loaded machine: the main
   * scenario holds the no-5xx promise; these are counted and printed, not failed on).
   */
  retryLater: number;
  /** Other answers than 200, 429 and those 500s, and other failures, e.g. `503 {...}`. */
  other: string[];
}

export interface RestartFigures {
  runs: RestartRun[];
  seconds: number;
}

/** Starts `count` processes that keep one core each busy; the returned function ends them. */
function startHogs(count: number): () => void {
  const hogs: ChildProcess[] = [];
  for (let i = 0; i < count; i++)
    hogs.push(spawn(process.execPath, ["-e", "for(;;){}"], { stdio: "ignore" }));
  return () => {
    for (const hog of hogs) if (hog.exitCode === null && hog.signalCode === null) hog.kill("SIGKILL");
  };
}

/**
 * A bot with a token through the management endpoints, tried three times: on a loaded machine the
 * only vote-ingest replica's `/readyz` can miss the balancer's 1 s deadline (no replica ready).
 */
async function botOf(fleet: Fleet, topology: Topology): Promise<Bot> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await createBot(fleet, topology, false);
    } catch (error) {
      if (attempt === 3) throw error;
      await sleep(1_000);
    }
  }
}

export async function runRestarts(topology: Topology, options: RestartOptions): Promise<RestartFigures> {
  const { log } = options;
  const started = Date.now();
  const fleet = await startFleet(topology, { api: 2, "vote-ingest": 1, "webhook-dispatcher": 0 }, log);
  let stopHogs = () => {};
  const runs: RestartRun[] = [];
  let current: RestartRun | undefined;
  let running = true;
  try {
    // Requests go round the bots; a token past its limit (600 a minute) is answered 429, an
    // answer like 200 here.
    const tokens: Bot[] = [];
    for (let i = 0; i < 8; i++) tokens.push(await botOf(fleet, topology));
    stopHogs = startHogs(options.hogs);
    const count = (outcome: Outcome) => {
      const run = current;
      if (!run) return;
      switch (outcome.kind) {
        case "answered":
          if (outcome.status === 200 || outcome.status === 429) run.answered++;
          else if (outcome.status === 500 && outcome.headers["retry-after"] !== undefined) run.retryLater++;
          else if (run.other.length < 1_000)
            run.other.push(`${outcome.status} ${outcome.body.slice(0, 120)}`);
          return;
        case "reset":
          if (outcome.reused) run.resetsReused++;
          else run.resetsNew++;
          return;
        case "refused":
          run.refused++;
          return;
        case "timeout":
          run.timeouts++;
          return;
        default:
          run.other.push(`${outcome.code} from ${outcome.replica}`);
      }
    };
    let sent = 0;
    const direct = async (spec: RequestSpec): Promise<Outcome> => {
      const names = fleet.api.replicas().map((r) => r.name);
      let outcome: Outcome = { kind: "refused", replica: "none" };
      for (let tried = 0; tried < names.length; tried++) {
        outcome = await fleet.api.requestTo(names[(sent + tried) % names.length] as string, spec);
        if (outcome.kind !== "refused") return outcome;
      }
      return outcome;
    };
    const workers = Array.from({ length: options.workers }, async () => {
      while (running) {
        const who = tokens[sent++ % tokens.length] as Bot;
        const spec: RequestSpec = {
          method: "GET",
          path: `/api/v1/bots/${who.id}/check?userId=${100_000_000_000_000_000n + BigInt(sent)}`,
          headers: { authorization: who.token },
          timeoutMs: 15_000,
        };
        count(options.client === "direct" ? await direct(spec) : await fleet.api.request(spec));
      }
    });

    for (let i = 0; i < options.runs; i++) {
      const [oldest] = fleet.apiNames();
      const fresh = await topology.start("api");
      fleet.enter(fleet.api, fresh);
      // The new replica takes load (and its keep-alive connections fill) before the old one goes.
      await sleep(1_000);
      const victim = fleet.live.get(oldest as string) as Replica;
      const run: RestartRun = {
        victim: victim.name,
        exitCode: null,
        stopMs: 0,
        answered: 0,
        resetsReused: 0,
        resetsNew: 0,
        refused: 0,
        timeouts: 0,
        retryLater: 0,
        other: [],
      };
      current = run;
      const signalled = Date.now();
      run.exitCode = await victim.process.stop();
      run.stopMs = Date.now() - signalled;
      // Requests already sent to it have failed or been answered; then it leaves the balancer.
      await sleep(500);
      fleet.live.delete(victim.name);
      fleet.api.remove(victim.name);
      current = undefined;
      runs.push(run);
      log(
        `restart ${i + 1}/${options.runs}: SIGTERM ${run.victim}, exited ${run.exitCode} after ${run.stopMs} ms; ${run.answered} answered, resets ${run.resetsReused} on keep-alive + ${run.resetsNew} on new connections, ${run.refused} refused, ${run.timeouts} timeouts, ${run.retryLater} × 500 with Retry-After, ${run.other.length} other${run.other.length ? ` (${run.other.slice(0, 3).join(" | ")})` : ""}`,
      );
    }
    running = false;
    await Promise.all(workers);
  } finally {
    running = false;
    stopHogs();
    fleet.close();
  }
  return { runs, seconds: (Date.now() - started) / 1000 };
}

/** Every promise the restarts break, one sentence each. */
export function restartViolations(f: RestartFigures): string[] {
  const out: string[] = [];
  const resets = f.runs.reduce((n, r) => n + r.resetsReused + r.resetsNew, 0);
  if (resets > 0)
    out.push(
      `rolling restarts: ${resets} requests reset in ${f.runs.filter((r) => r.resetsReused + r.resetsNew > 0).length} of ${f.runs.length} runs (${f.runs.map((r) => `${r.resetsReused}+${r.resetsNew}`).join(", ")}: on keep-alive + on new connections)`,
    );
  const timeouts = f.runs.reduce((n, r) => n + r.timeouts, 0);
  if (timeouts > 0) out.push(`rolling restarts: ${timeouts} requests timed out`);
  const other = f.runs.flatMap((r) => r.other);
  if (other.length > 0)
    out.push(
      `rolling restarts: ${other.length} answers were neither 200 nor 429 (${other.slice(0, 3).join(" | ")})`,
    );
  const codes = f.runs.map((r) => r.exitCode);
  if (codes.some((c) => c !== 0))
    out.push(`rolling restarts: the replicas exited ${codes.join(", ")}, not 0`);
  return out;
}

/** The one summary line. */
export function restartSummary(f: RestartFigures): string {
  const resets = f.runs.reduce((n, r) => n + r.resetsReused + r.resetsNew, 0);
  const stop = f.runs.map((r) => r.stopMs).sort((a, b) => a - b);
  return [
    `restarts: ${f.runs.length} runs`,
    `${resets} resets (${f.runs.filter((r) => r.resetsReused + r.resetsNew > 0).length} runs with any)`,
    `${f.runs.reduce((n, r) => n + r.answered, 0)} answered (200 or 429) during the stops`,
    `${f.runs.reduce((n, r) => n + r.refused, 0)} refused connects`,
    `${f.runs.reduce((n, r) => n + r.retryLater, 0)} × 500 with Retry-After`,
    `SIGTERM to exit ${stop[0] ?? 0}–${stop.at(-1) ?? 0} ms`,
    `${f.seconds.toFixed(0)} s`,
  ].join("; ");
}
