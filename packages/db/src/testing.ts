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
  const db = createDb({ url, poolMax: options.poolMax ?? 5 });
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
