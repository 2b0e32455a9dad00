// Jest global setup: pick PostgreSQL/Redis, then build one migrated template database per run.
// Plain ESM JavaScript, because jest loads global setup outside its module transform.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { startContainersIfNeeded } from "./containers.mjs";

const DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/botdir";
const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";
const MIGRATE_CLI = fileURLToPath(new URL("../src/migrate-cli.ts", import.meta.url));

export function withDatabase(url, name) {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export default async function globalSetup() {
  const started = await startContainersIfNeeded();
  const databaseUrl = started?.databaseUrl ?? process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
  const redisUrl = started?.redisUrl ?? process.env.REDIS_URL ?? DEFAULT_REDIS_URL;
  const runId = `${Date.now().toString(36)}${randomBytes(2).toString("hex")}`;
  const template = `botdir_tpl_${runId}`;
  process.env.TEST_RUN_ID = runId;
  process.env.TEST_TEMPLATE_DB = template;
  process.env.TEST_DATABASE_URL = databaseUrl;
  process.env.TEST_REDIS_URL = redisUrl;
  await dropStale(databaseUrl);
  const result = spawnSync(process.execPath, ["--import", "tsx", MIGRATE_CLI], {
    env: { ...process.env, DATABASE_URL: withDatabase(databaseUrl, template) },
    encoding: "utf8",
  });
  if (result.status !== 0) {
    throw new Error(`Could not migrate the test template database: ${result.stderr || result.stdout}`);
  }
}

/** Drops test databases left behind by runs that were killed more than an hour ago. */
async function dropStale(databaseUrl) {
  const client = new pg.Client({ connectionString: withDatabase(databaseUrl, "postgres") });
  await client.connect();
  try {
    const { rows } = await client.query(
      "SELECT datname FROM pg_database WHERE datname ~ '^botdir_(t|tpl)_[a-z0-9]+'",
    );
    const cutoff = Date.now() - 60 * 60 * 1000;
    for (const { datname } of rows) {
      const id = /^botdir_(?:t|tpl)_([a-z0-9]+?)[0-9a-f]{4}(?:_|$)/.exec(datname)?.[1];
      const born = id ? Number.parseInt(id, 36) : Number.NaN;
      if (Number.isFinite(born) && born < cutoff) {
        await client.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => {});
      }
    }
  } finally {
    await client.end();
  }
}
