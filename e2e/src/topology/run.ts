/**
 * `pnpm test:topology`: the apps as a distributed system. Builds the apps, starts a 3-master Redis
 * Cluster, PgBouncer in transaction mode in front of the local PostgreSQL, 2 API, 2 vote-ingest and
 * 3 webhook-dispatcher replicas from dist/, runs a minute of mixed load with faults
 * (scenario.ts), prints one summary line and exits 1 with every broken promise listed.
 *
 * Then the rolling-restart scenario (restart.ts) runs `--restarts=N` times (default 3; 0 skips
 * it): a new API replica started and the oldest one SIGTERMed under `/check` load from 8
 * keep-alive workers (`--restart-client=direct`, the default: round robin over the replicas with no
 * readiness; `balancer`: through the balancer), with two CPU hogs beside them; any request reset
 * fails the suite.
 * `--restarts-only` runs that scenario alone (e.g. `pnpm test:topology --restarts-only
 * --restarts=20`).
 *
 * Options: `--no-build` (dist/ is current), `--simple` (PostgreSQL directly and one Redis: the
 * single-instance setup, same scenario), `--load-seconds=N` and `--scale=F` (rates × F). DATABASE_URL names the PostgreSQL
 * server (default the local one). The app replicas listen on TOPOLOGY_PORT_BASE (17020) and up,
 * PgBouncer on TOPOLOGY_PORT_BASE - 10; Redis and the webhook receiver on free ports. A missing
 * `pgbouncer`, `redis-server` or `redis-cli` fails the suite with one line saying how to install it.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildApps } from "./phases.js";
import { restartSummary, restartViolations, runRestarts } from "./restart.js";
import { runScenario, type ScenarioOptions, summary, violations } from "./scenario.js";
import { startTopology, type Topology } from "./topology.js";

const args = new Set(process.argv.slice(2));
const started = Date.now();
const elapsed = () => ((Date.now() - started) / 1000).toFixed(1);
const log = (line: string) => process.stdout.write(`[topology ${elapsed()} s] ${line}\n`);

/** `--name=value` of the command line, or undefined. */
const option = (name: string): string | undefined =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
// For working on the suite only: `--load-seconds=N` (the timeline needs about 50 s) and
// `--scale=F` (every rate times F).
const loadSeconds = Number(option("load-seconds") ?? 60);
const scale = Number(option("scale") ?? 1);
const restarts = Number(option("restarts") ?? 3);
const restartsOnly = args.has("--restarts-only");
const restartClient = option("restart-client") === "balancer" ? "balancer" : "direct";

const SCENARIO: ScenarioOptions = {
  loadMs: loadSeconds * 1000,
  votesPerSecond: 300 * scale,
  checksPerSecond: 100 * scale,
  statsPerSecond: 20 * scale,
  webhookBots: 40,
  redisDownMs: 5_000,
  deliveryDeadlineMs: 120_000,
  // Five minutes in all, teardown included.
  finishBy: started + 280_000,
  log,
};

class SetupError extends Error {}

async function main(): Promise<number> {
  if (!args.has("--no-build") && !buildApps(log)) {
    process.stdout.write("topology: FAILED: the build failed\n");
    return 1;
  }

  const distributed = !args.has("--simple");
  let topology: Topology | undefined;
  let problems: string[] = [];
  const lines: string[] = [];
  try {
    topology = await startTopology({
      distributed,
      serverUrl: process.env.DATABASE_URL || "postgresql://postgres@127.0.0.1:5432/postgres",
      portBase: Number(process.env.TOPOLOGY_PORT_BASE || 17020),
      log,
    }).catch((error: Error) => {
      // A missing binary or a store that does not start: its one line, no stack.
      throw new SetupError(error.message);
    });
    const setup = distributed ? "PgBouncer + Redis Cluster" : "PostgreSQL + one Redis";
    if (!restartsOnly) {
      const figures = await runScenario(topology, SCENARIO);
      problems = violations(figures, SCENARIO);
      const total = (Date.now() - started) / 1000;
      if (total > 300) problems.push(`the suite took ${total.toFixed(0)} s, more than 5 minutes`);
      lines.push(`${summary(figures, total)} (${setup})`);
    }
    if (restarts > 0) {
      const figures = await runRestarts(topology, {
        runs: restarts,
        workers: 8,
        hogs: 2,
        client: restartClient,
        log,
      });
      problems.push(...restartViolations(figures));
      lines.push(`${restartSummary(figures)} (${setup})`);
    }
  } catch (error) {
    if (error instanceof SetupError) {
      process.stdout.write(`topology: FAILED: ${error.message}\n`);
      return 1;
    }
    problems.push(`the suite could not run: ${(error as Error).stack ?? error}`);
  } finally {
    if (topology && problems.length > 0) {
      const dir = mkdtempSync(join(tmpdir(), "botdir-topology-logs-"));
      topology.saveLogs(dir);
      problems.push(`process logs: ${dir}`);
    }
    await topology?.destroy();
  }
  for (const line of lines) process.stdout.write(`${line}\n`);
  if (problems.length === 0) {
    process.stdout.write("topology: ok\n");
    return 0;
  }
  process.stdout.write(
    `topology: FAILED (${problems.length}):\n${problems.map((p) => `  - ${p}`).join("\n")}\n`,
  );
  return 1;
}

process.exit(await main());
