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
  /** Set by `pnpm test:distributed`: the same PostgreSQL through a transaction-pooling PgBouncer. */
  poolerUrl: "TEST_POOLER_URL",
  /** Set by `pnpm test:distributed`: `host:port,…` of a Redis Cluster standing in for the shared Redis. */
  redisClusterNodes: "TEST_REDIS_CLUSTER_NODES",
} as const;

export function baseDatabaseUrl(): string {
  return process.env[TEST_ENV.databaseUrl] || process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
}

export function testRedisUrl(): string {
  return process.env[TEST_ENV.redisUrl] || process.env.REDIS_URL || DEFAULT_REDIS_URL;
}

/** The Redis Cluster the apps use instead of testRedisUrl() in a distributed run, or undefined. */
export function testRedisClusterNodes(): string | undefined {
  return process.env[TEST_ENV.redisClusterNodes] || undefined;
}

/**
 * PostgreSQL itself for a URL of the test databases: in a distributed run (TEST_POOLER_URL) the
 * apps' DATABASE_URL goes through PgBouncer and this is their DATABASE_DIRECT_URL; otherwise
 * the URL as it is.
 */
export function directUrlOf(url: string): string {
  const pooler = process.env[TEST_ENV.poolerUrl];
  if (!pooler) return url;
  const u = new URL(url);
  if (u.host !== new URL(pooler).host) return url;
  const direct = new URL(baseDatabaseUrl());
  u.host = direct.host;
  return u.toString();
}

export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/**
 * Runs `sql` on the server's `postgres` database, outside any test database (CREATE, ALTER or
 * DROP DATABASE).
 */
export async function adminQuery(sql: string): Promise<void> {
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
  // In a distributed run the database is reached through PgBouncer, as the apps reach it there.
  const url = withDatabase(process.env[TEST_ENV.poolerUrl] || baseDatabaseUrl(), name);
  // A connect timeout well above production's 500 ms: a test machine under load must not turn
  // a slow connect into a 500 (the fast-failure tests build their own Db).
  const db = createDb({
    url,
    directUrl: directUrlOf(url),
    poolMax: options.poolMax ?? 5,
    connectionTimeoutMs: 5_000,
  });
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

/**
 * A resource of this test file: made by `start` before its tests (beforeAll, with `timeoutMs` when
 * given) and ended by `stop` after them (afterAll). The object returned reads the resource; reading
 * it outside a test (or hook) throws, naming `what`.
 */
export function useForFile<T extends object>(
  what: string,
  start: () => Promise<T>,
  stop: (resource: T) => Promise<unknown>,
  timeoutMs?: number,
): T {
  let started: T | undefined;
  beforeAll(async () => {
    started = await start();
  }, timeoutMs);
  afterAll(async () => {
    if (started) await stop(started);
  });
  return new Proxy({} as T, {
    get(_target, key) {
      if (!started) throw new Error(`${what} is read outside a test`);
      return Reflect.get(started, key);
    },
  });
}

/**
 * This test file's database (createTestDatabase): created before its tests (beforeAll) and dropped
 * after them (afterAll); its fields are read inside tests.
 */
export function useTestDatabase(options: { poolMax?: number } = {}): TestDatabase {
  return useForFile(
    "the test database",
    () => createTestDatabase(options),
    (t) => t.drop(),
  );
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
 * redis-server on 127.0.0.1:`port` with nothing persisted (`--save "" --appendonly no`, working
 * directory `dir`) and `args`: the process at once, and `ready` once it accepts
 * connections (rejected if it exits, fails to spawn, or is not ready within 10 s; its last output
 * is in the error).
 */
function spawnRedisServer(
  spawn: typeof import("node:child_process").spawn,
  label: string,
  port: number,
  dir: string,
  args: string[] = [],
): { proc: import("node:child_process").ChildProcess; ready: Promise<void> } {
  const proc = spawn(
    "redis-server",
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      ...args,
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const ready = new Promise<void>((resolve, reject) => {
    let output = "";
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`${label} did not start on port ${port}: ${output.slice(-500)}`));
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
      reject(new Error(`${label} exited with ${code}: ${output.slice(-500)}`));
    });
  });
  return { proc, ready };
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

  const start = () => {
    mkdirSync(dir, { recursive: true }); // removed by stop/kill; a restart makes it again
    const { proc, ready } = spawnRedisServer(spawn, "redis-server", port, dir);
    child = proc;
    return ready;
  };

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
  // Every statement's plan, nested ones included, as a JSON notice on this connection.
  const settings = {
    log_min_duration: "0",
    log_nested_statements: "on",
    log_format: "'json'",
    log_level: "'notice'",
    ...(options.analyze ? { log_analyze: "on" } : {}),
  };
  client.on("notice", onNotice);
  try {
    await client.query("BEGIN");
    await client.query("LOAD 'auto_explain'");
    for (const [name, value] of Object.entries(settings)) {
      await client.query(`SET LOCAL auto_explain.${name} = ${value}`);
    }
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

export interface PrivatePgBouncer {
  /** `postgresql://` URL of `database` through the pooler. */
  url(database: string): string;
  port: number;
  stop(): Promise<void>;
}

/** The PgBouncer binary: on PATH or where Debian's package puts it; null when not installed. */
export async function findPgBouncer(): Promise<string | null> {
  const { accessSync, constants } = await import("node:fs");
  const { delimiter, join } = await import("node:path");
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/usr/local/sbin"];
  for (const dir of dirs) {
    try {
      const file = join(dir, "pgbouncer");
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return null;
}

/**
 * A private PgBouncer in transaction mode in front of the PostgreSQL of `targetUrl` (every
 * database, as that URL's user), with the settings docs/scaling.md gives operators. Fails with one
 * line naming the package when `pgbouncer` is not installed. Run as root it drops to the
 * `postgres` user, as PgBouncer refuses to run as root.
 */
export async function startPgBouncer(
  options: { targetUrl?: string; port?: number; poolSize?: number } = {},
): Promise<PrivatePgBouncer> {
  const binary = await findPgBouncer();
  if (!binary) throw new Error("pgbouncer is not installed: apt-get install -y pgbouncer");
  const { spawn } = await import("node:child_process");
  const { chmodSync, mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { connect } = await import("node:net");
  const target = new URL(options.targetUrl ?? baseDatabaseUrl());
  const port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), "botdir-pgbouncer-"));
  chmodSync(dir, 0o777);
  const user = decodeURIComponent(target.username || "postgres");
  const ini = join(dir, "pgbouncer.ini");
  writeFileSync(
    ini,
    [
      "[databases]",
      `* = host=${target.hostname} port=${target.port || "5432"} user=${user}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = any",
      "pool_mode = transaction",
      "ignore_startup_parameters = extra_float_digits,statement_timeout,options",
      "max_client_conn = 1000",
      `default_pool_size = ${options.poolSize ?? 10}`,
      "server_reset_query =",
      `logfile = ${join(dir, "pgbouncer.log")}`,
      "",
    ].join("\n"),
  );
  chmodSync(ini, 0o644);
  const asRoot = typeof process.getuid === "function" && process.getuid() === 0;
  const child = spawn(binary, [...(asRoot ? ["-u", "postgres"] : []), ini], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  const listening = () =>
    new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
  const deadline = Date.now() + 15_000;
  while (!(await listening())) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`pgbouncer did not start on port ${port}: ${stderr.slice(-500)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    port,
    url(database) {
      const u = new URL(target.toString());
      u.host = `127.0.0.1:${port}`;
      u.pathname = `/${database}`;
      return u.toString();
    },
    stop: () =>
      new Promise<void>((resolve) => {
        process.removeListener("exit", killOnExit);
        const done = () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        };
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once("exit", done);
        child.kill("SIGTERM");
      }),
  };
}

export interface PrivateRedisCluster {
  /** `host:port,…` of the masters (REDIS_CLUSTER_NODES). */
  nodes: string;
  ports: number[];
  /** SIGKILL of master `index`, like a crash. */
  kill(index: number): Promise<void>;
  /** Starts master `index` again with its cluster config: it takes its slots back, empty. */
  restart(index: number): Promise<void>;
  /** Resolves when every master reports `cluster_state:ok`. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A private Redis Cluster of `masters` masters (no replicas) on free ports: `redis-server
 * --cluster-enabled yes` each, joined by `redis-cli --cluster create`. Nothing is persisted but
 * each node's cluster config, so a killed master comes back owning its slots, empty. Fails with
 * one line naming the package when `redis-server` or `redis-cli` is missing.
 */
export async function startRedisCluster(options: { masters?: number } = {}): Promise<PrivateRedisCluster> {
  const { spawn, execFile } = await import("node:child_process");
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { promisify } = await import("node:util");
  const run = promisify(execFile);
  for (const tool of ["redis-server", "redis-cli"]) {
    await run(tool, ["--version"]).catch(() => {
      throw new Error(`${tool} is not installed: apt-get install -y redis-server (it brings redis-cli)`);
    });
  }
  const count = options.masters ?? 3;
  const dir = mkdtempSync(join(tmpdir(), "botdir-redis-cluster-"));
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  const children: (ReturnType<typeof spawn> | undefined)[] = [];
  const killAll = () => {
    for (const c of children) c?.kill("SIGKILL");
  };
  process.once("exit", killAll);

  const start = (index: number) => {
    const port = ports[index] as number;
    const { proc, ready } = spawnRedisServer(spawn, "redis-server (cluster)", port, dir, [
      "--cluster-enabled",
      "yes",
      "--cluster-config-file",
      `nodes-${port}.conf`,
      "--cluster-node-timeout",
      "2000",
    ]);
    children[index] = proc;
    return ready;
  };

  const terminate = (index: number, signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      const proc = children[index];
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return resolve();
      proc.once("exit", () => resolve());
      proc.kill(signal);
    });

  async function waitHealthy(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(
        ports.map((port) =>
          run("redis-cli", ["-p", String(port), "cluster", "info"]).then(
            (r) => /cluster_state:ok/.test(r.stdout),
            () => false,
          ),
        ),
      );
      if (states.every(Boolean)) return;
      if (Date.now() > deadline)
        throw new Error(`Redis Cluster on ${ports.join(",")} did not become healthy`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  try {
    await Promise.all(ports.map((_, i) => start(i)));
    await run("redis-cli", [
      "--cluster",
      "create",
      ...ports.map((p) => `127.0.0.1:${p}`),
      "--cluster-replicas",
      "0",
      "--cluster-yes",
    ]);
    await waitHealthy();
  } catch (error) {
    killAll();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    nodes: ports.map((p) => `127.0.0.1:${p}`).join(","),
    ports,
    kill: (index) => terminate(index, "SIGKILL"),
    async restart(index) {
      await terminate(index, "SIGTERM");
      await start(index);
    },
    waitHealthy,
    async stop() {
      process.removeListener("exit", killAll);
      await Promise.all(ports.map((_, i) => terminate(i, "SIGTERM")));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
