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
