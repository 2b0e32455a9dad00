/**
 * Test support: every test file gets its own PostgreSQL database, created from a template that
 * jest's global setup migrated once per run, and its own Redis key prefix. Files can therefore run
 * in parallel, and re-runs start clean.
 *
 * URLs: DATABASE_URL / REDIS_URL when set; otherwise testcontainers when a Docker engine is
 * available (started by global setup); otherwise the local defaults.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { createDb, type Db } from "./client.js";
import { DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL } from "./defaults.js";

/** Set by global setup; read by every test file. */
export const TEST_ENV = {
  runId: "TEST_RUN_ID",
  templateDb: "TEST_TEMPLATE_DB",
  databaseUrl: "TEST_DATABASE_URL",
  redisUrl: "TEST_REDIS_URL",
} as const;

export function baseDatabaseUrl(): string {
  return process.env[TEST_ENV.databaseUrl] || process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
}

export function testRedisUrl(): string {
  return process.env[TEST_ENV.redisUrl] || process.env.REDIS_URL || DEFAULT_REDIS_URL;
}

export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

async function adminQuery(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: withDatabase(baseDatabaseUrl(), "postgres") });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

export interface TestDatabase {
  url: string;
  name: string;
  db: Db;
  /** Closes the client and drops the database. */
  drop(): Promise<void>;
}

/** A fresh, migrated database of its own for one test file. */
export async function createTestDatabase(options: { poolMax?: number } = {}): Promise<TestDatabase> {
  const template = process.env[TEST_ENV.templateDb];
  if (!template) throw new Error("TEST_TEMPLATE_DB is not set: run the tests through jest's global setup.");
  const runId = process.env[TEST_ENV.runId] ?? "x";
  const name = `botdir_t_${runId}_${randomBytes(4).toString("hex")}`;
  // CREATE DATABASE ... TEMPLATE fails while another session is connected to the template;
  // nothing connects to it after setup, but retry briefly in case autovacuum does.
  for (let attempt = 0; ; attempt++) {
    try {
      await adminQuery(`CREATE DATABASE "${name}" TEMPLATE "${template}"`);
      break;
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const url = withDatabase(baseDatabaseUrl(), name);
  // A connect timeout well above production's 500 ms: a test machine under load must not turn
  // a slow connect into a 500 (the fast-failure tests build their own Db).
  const db = createDb({ url, poolMax: options.poolMax ?? 5, connectionTimeoutMs: 5_000 });
  return {
    url,
    name,
    db,
    async drop() {
      await db.close();
      await adminQuery(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
  };
}

/** A Redis key prefix of its own for one test file, e.g. `t:ab12cd34:`. */
export function testRedisPrefix(): string {
  return `t${process.env[TEST_ENV.runId] ?? ""}:${randomBytes(4).toString("hex")}:`;
}

export interface SeededBot {
  id: string;
  /** The raw API token (only its hash is stored), or null for a bot without one. */
  token: string | null;
}

/**
 * Test fixture: a bot row, approved with a fresh token by default. Tests of every app use it so
 * they do not each re-implement token hashing.
 */
export async function seedBot(
  db: Db,
  options: { id?: string; status?: "pending" | "approved"; withToken?: boolean; serverCount?: number } = {},
): Promise<SeededBot> {
  const { generateToken, hashToken } = await import("./tokens.js");
  const id = options.id ?? randomBotId();
  const status = options.status ?? "approved";
  const token = (options.withToken ?? status === "approved") ? generateToken() : null;
  await db.prisma.bot.create({
    data: {
      id,
      status,
      approvedAt: status === "approved" ? new Date() : null,
      tokenHash: token ? hashToken(token) : null,
      tokenCreatedAt: token ? new Date() : null,
      serverCount: options.serverCount === undefined ? null : BigInt(options.serverCount),
    },
  });
  return { id, token };
}

/** A random valid 18-digit application (or user) id. */
export function randomBotId(): string {
  const digits = Array.from(randomBytes(18), (b) => String(b % 10)).join("");
  return `1${digits.slice(1)}`;
}

export const randomUserId = randomBotId;

export interface PrivateRedis {
  url: string;
  port: number;
  /** Graceful stop (SIGTERM); resolves when the process has exited. */
  stop(): Promise<void>;
  /** Hard stop (SIGKILL), like a crash; resolves when the process has exited. */
  kill(): Promise<void>;
  /** Starts it again on the same port. It comes back EMPTY: nothing is ever persisted. */
  restart(): Promise<void>;
  /** The running server's process id (benchmarks read its CPU time). */
  pid(): number | undefined;
}

/** A free TCP port on 127.0.0.1 (bound, read, released). */
export async function freePort(): Promise<number> {
  const { createServer } = await import("node:net");
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/**
 * A private `redis-server` for fault tests (stop it, kill it, bring it back empty) without touching
 * the shared Redis. Needs `redis-server` on PATH. Nothing is persisted (`--save "" --appendonly no`),
 * so a restart is an empty Redis, as after a crash without persistence.
 */
export async function startRedisServer(options: { port?: number } = {}): Promise<PrivateRedis> {
  const { spawn } = await import("node:child_process");
  const { mkdirSync, mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), "botdir-redis-"));
  type Child = ReturnType<typeof spawn>;
  let child: Child | undefined;
  const killOnExit = () => child?.kill("SIGKILL");
  process.once("exit", killOnExit);

  const start = () =>
    new Promise<void>((resolve, reject) => {
      mkdirSync(dir, { recursive: true }); // removed by stop/kill; a restart makes it again
      const proc = spawn(
        "redis-server",
        ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      child = proc;
      let output = "";
      const timer = setTimeout(() => {
        proc.kill("SIGKILL");
        reject(new Error(`redis-server did not start on port ${port}: ${output.slice(-500)}`));
      }, 10_000);
      proc.stdout?.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes("Ready to accept connections")) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.stderr?.on("data", (chunk: Buffer) => {
        output += chunk.toString();
      });
      proc.once("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`redis-server exited with ${code}: ${output.slice(-500)}`));
      });
    });

  const terminate = (signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      const done = () => {
        rmSync(dir, { recursive: true, force: true });
        resolve();
      };
      const proc = child;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return done();
      proc.once("exit", done);
      proc.kill(signal);
    });

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: () => terminate("SIGTERM"),
    kill: () => terminate("SIGKILL"),
    async restart() {
      await terminate("SIGTERM");
      await start();
    },
    pid: () => child?.pid,
  };
}

/**
 * Watches a pool's queries until `restore()`: records each statement's name ("unnamed" for one
 * without a name) and, with `delayMs`, holds each for that long before sending it, so concurrent
 * requests pile up behind the statement in flight as they do under load.
 */
export function watchQueries(
  pool: pg.Pool,
  options: { delayMs?: number } = {},
): {
  names: string[];
  restore(): void;
} {
  const names: string[] = [];
  const query = pool.query;
  pool.query = (async (...args: unknown[]) => {
    const config = args[0] as { name?: string } | string;
    names.push(typeof config === "string" ? "unnamed" : (config.name ?? "unnamed"));
    if (options.delayMs) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
    return (query as (...a: unknown[]) => unknown).apply(pool, args);
  }) as typeof query;
  return {
    names,
    restore: () => {
      pool.query = query;
    },
  };
}

/** One plan auto_explain reported (FORMAT JSON): a statement and its plan tree. */
export interface NestedPlan {
  "Query Text": string;
  Plan: PlanNode;
}

/** A node of a JSON plan; the actual figures are there when the plans were taken with `analyze`. */
export interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  Alias?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  Plans?: PlanNode[];
}

/**
 * Runs `work` on one connection of `pool` inside a transaction that is rolled back, with
 * auto_explain reporting the plan of every statement it runs, those inside functions included
 * (a PL/pgSQL function's statements are invisible to EXPLAIN of its call). With `analyze`, the
 * plans carry the rows each node produced. Needs the auto_explain module (part of PostgreSQL's
 * standard distribution) and a role allowed to LOAD it.
 */
export async function nestedPlans(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<unknown>,
  options: { analyze?: boolean } = {},
): Promise<NestedPlan[]> {
  const client = await pool.connect();
  const plans: NestedPlan[] = [];
  const onNotice = (notice: { message?: string }) => {
    const json = notice.message?.match(/plan:\s*(\{[\s\S]*\})\s*$/)?.[1];
    if (json) plans.push(JSON.parse(json) as NestedPlan);
  };
  client.on("notice", onNotice);
  try {
    await client.query("BEGIN");
    await client.query("LOAD 'auto_explain'");
    await client.query("SET LOCAL auto_explain.log_min_duration = 0");
    await client.query("SET LOCAL auto_explain.log_nested_statements = on");
    await client.query("SET LOCAL auto_explain.log_format = 'json'");
    await client.query("SET LOCAL auto_explain.log_level = 'notice'");
    if (options.analyze) await client.query("SET LOCAL auto_explain.log_analyze = on");
    await work(client);
    return plans;
  } finally {
    client.off("notice", onNotice);
    await client.query("ROLLBACK").catch(() => {});
    client.release();
  }
}

/** Every node of a plan tree, the root first. */
export function planNodes(node: PlanNode, out: PlanNode[] = []): PlanNode[] {
  out.push(node);
  for (const child of node.Plans ?? []) planNodes(child, out);
  return out;
}

/** Test support: reads the Prometheus text format of a /metrics answer, so tests can look samples up by label. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]!] = pair[2]!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the one sample named `name` whose labels include `labels`; undefined if none. */
export function sampleValue(
  samples: Sample[],
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const found = samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}
