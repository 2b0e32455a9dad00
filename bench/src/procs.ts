import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseMetrics } from "@botdir/db/testing";

export { freePort, startRedisServer } from "@botdir/test-stores";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/**
 * The Node flags of the production image (docker/Dockerfile's `NODE_OPTIONS`), read from the
 * Dockerfile so the bench cannot drift from it: the apps and the floor run with them.
 * BENCH_NODE_ARGS replaces them ("" for V8's defaults).
 */
export function appNodeArgs(): string[] {
  const configured = process.env.BENCH_NODE_ARGS;
  if (configured !== undefined) return configured.split(" ").filter(Boolean);
  const dockerfile = readFileSync(path.join(ROOT, "docker/Dockerfile"), "utf8");
  const options = /NODE_OPTIONS="([^"]*)"/.exec(dockerfile)?.[1];
  if (options === undefined) throw new Error('docker/Dockerfile sets no NODE_OPTIONS="…"');
  return options.split(" ").filter(Boolean);
}

/**
 * The Node binary of the apps and the floor: BENCH_NODE (e.g. the production image's Node line,
 * docs/performance.md), else the one running the bench.
 */
export const APP_NODE = process.env.BENCH_NODE || process.execPath;

/** `node --version` of APP_NODE (recorded with the results). */
export function appNodeVersion(): string {
  if (APP_NODE === process.execPath) return process.version;
  return execFileSync(APP_NODE, ["--version"], { encoding: "utf8" }).trim();
}

/**
 * The environment every app of a bench run starts with: production mode, its scratch database and
 * private Redis, the internal key and the secret encryption key. LOG_LEVEL is BENCH_LOG_LEVEL, else
 * `logLevel`.
 */
export function appEnv(
  stack: { dbUrl: string; redisUrl: string; internalKey: string; encryptionKey: string },
  logLevel: string,
) {
  return {
    NODE_ENV: "production",
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? logLevel,
    DATABASE_URL: stack.dbUrl,
    REDIS_URL: stack.redisUrl,
    INTERNAL_API_KEY: stack.internalKey,
    SECRET_ENCRYPTION_KEY: stack.encryptionKey,
  };
}

export interface Proc {
  name: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * How the apps and the floor run: "bundle" (default) as the production image runs them, `node
 * dist/main.js` built by scripts/build-app.mjs (esbuild) at the start of the run; "source"
 * (BENCH_APPS=source) from their TypeScript through tsx, whose loader and esbuild's keepNames
 * wrappers production does not pay.
 */
export const APPS_FROM = process.env.BENCH_APPS === "source" ? "source" : "bundle";

/**
 * The files to start for `entries` (TypeScript entries of one package, e.g. "apps/api/src/main.ts"):
 * under "bundle", builds that package's dist/ and returns the bundles, in order. A package with a
 * `build` script (the apps) is built by it, so its dist/ is the one the images run, with every entry
 * and asset (vote-ingest's botctl.js, the API's reference page renderer); another (the bench's
 * floors) gets its entries in one esbuild run, which empties dist/ first, so they are built together.
 */
export function appEntries(...entries: [string, ...string[]]): string[] {
  if (APPS_FROM === "source") return entries;
  const split = entries.map((entry) => entry.split("/src/") as [string, string]);
  const packageDir = split[0]?.[0] as string;
  if (split.some(([dir]) => dir !== packageDir)) throw new Error("appEntries: entries of one package only");
  const names = split.map(([, source]) => [path.basename(source, ".ts"), source] as const);
  const cwd = path.join(ROOT, packageDir);
  const scripts = JSON.parse(readFileSync(path.join(cwd, "package.json"), "utf8")).scripts ?? {};
  const built = names.map(([name]) => `${packageDir}/dist/${name}.js`);
  if (typeof scripts.build === "string") {
    execFileSync("pnpm", ["run", "--silent", "build"], { cwd, stdio: ["ignore", "ignore", "inherit"] });
    const missing = built.filter((file) => !existsSync(path.join(ROOT, file)));
    if (missing.length > 0)
      throw new Error(`appEntries: ${packageDir}'s build made no ${missing.join(", ")}`);
  } else {
    execFileSync(
      process.execPath,
      [path.join(ROOT, "scripts/build-app.mjs"), ...names.map(([name, source]) => `${name}=src/${source}`)],
      { cwd, stdio: ["ignore", "ignore", "inherit"] },
    );
  }
  return built;
}

/** appEntries for one entry. */
export const appEntry = (entry: string): string => appEntries(entry)[0] as string;

/**
 * Starts `node <entry>` (a bundle, see appEntry) or `node --import tsx <entry>` (TypeScript) under
 * APP_NODE with env.
 */
export async function startNode(
  name: string,
  entry: string,
  env: Record<string, string>,
  args: string[] = [],
  nodeArgs: string[] = [],
): Promise<Proc> {
  const loader = entry.endsWith(".ts") ? ["--import", "tsx"] : [];
  const child = spawn(APP_NODE, [...nodeArgs, ...loader, path.resolve(ROOT, entry), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (c) => {
    stderr = (stderr + c).slice(-4000);
  });
  child.stdout?.on("data", () => {});
  child.on("exit", (code) => {
    if (code && code !== 0) process.stderr.write(`[bench] ${name} exited ${code}: ${stderr}\n`);
  });
  return {
    name,
    child,
    stop: () =>
      new Promise((resolve) => {
        // A process killed by a signal has signalCode set and exitCode null: it is gone too.
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
      }),
  };
}

export async function waitForHttp(url: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`${url} did not come up`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Resident set size of a process in MB (Linux /proc). */
export function rssMb(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return Math.round((kb / 1024) * 10) / 10;
  } catch {
    return 0;
  }
}

/** The fields of /proc/<pid>/stat after the command name (utime is [11], stime [12], cutime [13], cstime [14]). */
function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** Seconds from clock ticks (100 Hz) of the given stat fields. */
const ticks = (fields: string[], ...at: number[]) => at.reduce((sum, i) => sum + Number(fields[i]), 0) / 100;

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
export function cpuSeconds(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    return ticks(statFields(pid), 11, 12); // utime, stime
  } catch {
    return 0;
  }
}

/** CPU seconds (user + system) so far of each process of a group, by pid. */
export type CpuByPid = Map<number, number>;

/**
 * CPU seconds of the PostgreSQL backends working for `database`, by pid (the process title names
 * the database: "postgres: <cluster>: <user> <database> <host> <state>"). Everything else is left
 * out: other databases' backends, and the cluster's checkpointer, WAL writer and background
 * writer, whose work on a server shared with other users' tests is mostly theirs (creating a
 * database from a template runs a checkpoint: the checkpointer used 7 % of a core while this
 * machine's other test suites ran). A committing backend flushes its own WAL, so what is left out
 * of ours is small. Compare two readings with cpuSecondsBetween.
 */
export function postgresCpu(database: string): CpuByPid {
  const byPid: CpuByPid = new Map();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() !== "postgres") continue;
      if (!readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(` ${database} `)) continue;
      byPid.set(Number(entry), ticks(statFields(Number(entry)), 11, 12)); // utime, stime
    } catch {
      // process went away
    }
  }
  return byPid;
}

/**
 * CPU seconds a group used between two readings: each process's growth, a process that started
 * in between counting from zero. One that exited in between takes its CPU since the first reading
 * with it (a pool closing an idle connection; rare while loaded, and small).
 */
export function cpuSecondsBetween(before: CpuByPid, after: CpuByPid): number {
  let total = 0;
  for (const [pid, seconds] of after) total += seconds - (before.get(pid) ?? 0);
  return total;
}

/** One Redis command over RESP (the bench has no Redis client of its own); the raw reply. */
export function redisCommand(url: string, ...args: string[]): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    let reply = "";
    const socket = connect(Number(port), hostname, () => {
      socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`);
    });
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      reply += chunk;
      // A bulk string ("$<length>\r\n<bytes>\r\n") may come in several chunks; anything else in one.
      const bulk = /^\$(\d+)\r\n/.exec(reply);
      if (bulk && Buffer.byteLength(reply) < bulk[0].length + Number(bulk[1]) + 2) return;
      socket.end();
      resolve(reply);
    });
    socket.once("error", reject);
  });
}

/**
 * Calls per command so far (`INFO commandstats`: commands a client sent and the commands its Lua
 * scripts ran, each under its own name; EVALSHA counts the script calls).
 */
export async function redisCommandCalls(url: string): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const match of (await redisCommand(url, "INFO", "commandstats")).matchAll(
    /^cmdstat_([^:]+):calls=(\d+)/gm,
  )) {
    calls[match[1] as string] = Number(match[2]);
  }
  return calls;
}

/**
 * Seconds the app has spent in garbage collection so far, from its Prometheus endpoint
 * (`nodejs_gc_duration_seconds_sum`, every kind); null when it cannot be read.
 */
export async function gcSeconds(metricsUrl: string): Promise<number | null> {
  try {
    return (await metricSums(metricsUrl, ["nodejs_gc_duration_seconds_sum"]))[0] ?? null;
  } catch {
    return null;
  }
}

/** Each named series at an app's /metrics, summed over its labels (0 when absent), in `names`' order. */
export async function metricSums(metricsUrl: string, names: readonly string[]): Promise<number[]> {
  const samples = parseMetrics(await (await fetch(metricsUrl)).text());
  return names.map((name) => samples.filter((s) => s.name === name).reduce((a, s) => a + s.value, 0));
}
