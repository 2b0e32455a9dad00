// Build check, run by .ci/run after `pnpm test` (and by hand: `node scripts/measure-bundles.mjs`):
// 1. builds every app (`turbo run build`, unless --no-build);
// 2. assembles each image's runtime folder exactly as docker/Dockerfile does (its COPY lines: the
//    app's dist/, the migration runner's dist/ and SQL files) in a temporary directory outside
//    the repository, so nothing resolves from the workspace's node_modules;
// 3. fails when a folder exceeds LIMIT_MB;
// 4. migrates a scratch database with the migrate image's CMD, starts each app from its folder
//    with its image's CMD (`node dist/main.js`, NODE_ENV=production) and waits for the path of its
//    HEALTHCHECK to answer 200, then stops it with SIGTERM and expects exit 0.
// Prints one table (size, start-up time = spawn to first 200). With --compare it also starts
// each app from source through tsx (`node --import tsx src/main.ts`, the development way) for
// the start-up comparison in docs/operations.md. Needs PostgreSQL and Redis (DATABASE_URL,
// REDIS_URL or the local defaults).
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const LIMIT_MB = 80;

/**
 * What each image holds and runs, read from docker/Dockerfile: per runtime target, its
 * `COPY --from=build … /repo/<path> /app/<path>` lines, its CMD, the health path and port variable
 * of its HEALTHCHECK and the other *_PORT variables it sets.
 */
function runtimeTargets(dockerfile) {
  const targets = {};
  for (const section of dockerfile.split(/^FROM /m)) {
    const name = /^runtime AS (\S+)\n/.exec(section)?.[1];
    if (!name) continue;
    const copy = [
      ...section.matchAll(/^COPY --from=build (?:--chown=\S+ )?\/repo\/(\S+) \/app\/(\S+)$/gm),
    ].map((m) => ({ from: m[1], to: m[2] }));
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(section)?.[1] ?? "null");
    const health = /process\.env\.(\w+)\+'(\/[^']*)'/.exec(section);
    const ports = [...section.matchAll(/\b(\w+_PORT)=\d+/g)].map((m) => m[1]);
    targets[name] = { copy, cmd, portVar: health?.[1], health: health?.[2], ports };
  }
  return targets;
}

const args = new Set(process.argv.slice(2));
const say = (line) => process.stdout.write(`[measure-bundles] ${line}\n`);

function folderBytes(dir) {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    total += entry.isDirectory() ? folderBytes(full) : statSync(full).size;
  }
  return total;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Starts `node <args>` in cwd; resolves with ms until GET url answers 200; stops it (SIGTERM). */
async function startAndStop(name, nodeArgs, cwd, env, url) {
  const started = performance.now();
  const child = spawn(process.execPath, nodeArgs, { cwd, env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  let ms;
  while (performance.now() - started < 20_000 && child.exitCode === null) {
    const status = await fetch(url).then(
      (res) => res.status,
      () => 0,
    );
    if (status === 200) {
      ms = performance.now() - started;
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  child.kill("SIGTERM");
  // A graceful stop (drain included) must finish well within this.
  const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const { code, signal } = await exited;
  clearTimeout(killer);
  if (ms === undefined) throw new Error(`${name}: ${url} never answered 200\n${stderr}`);
  if (code !== 0) throw new Error(`${name}: exited ${signal ?? code} after SIGTERM\n${stderr}`);
  return ms;
}

if (!args.has("--no-build")) {
  say("building (turbo run build)");
  const built = spawnSync("pnpm", ["exec", "turbo", "run", "build", "--output-logs=errors-only"], {
    cwd: root,
    stdio: "inherit",
  });
  if (built.status !== 0) process.exit(built.status ?? 1);
}

const RUNTIME = runtimeTargets(readFileSync(path.join(root, "docker/Dockerfile"), "utf8"));
const work = mkdtempSync(path.join(tmpdir(), "botdir-runtime-"));
const rows = [];
const problems = [];
const pg = createRequire(path.join(root, "packages/db/package.json"))("pg");
const baseUrl = process.env.DATABASE_URL || "postgresql://postgres@127.0.0.1:5432/botdir";
const dbName = `botdir_buildcheck_${randomBytes(4).toString("hex")}`;
const dbUrl = Object.assign(new URL(baseUrl), { pathname: `/${dbName}` }).toString();
try {
  for (const [name, spec] of Object.entries(RUNTIME)) {
    const dir = path.join(work, name);
    for (const { from, to } of spec.copy)
      cpSync(path.join(root, from), path.join(dir, to), { recursive: true });
    const mb = folderBytes(dir) / 1e6;
    rows.push({ name, mb });
    if (mb > LIMIT_MB) problems.push(`${name}: runtime folder is ${mb.toFixed(1)} MB, over ${LIMIT_MB} MB`);
  }

  const [, ...migrateArgs] = RUNTIME.migrate.cmd;
  const migrated = spawnSync(process.execPath, migrateArgs, {
    cwd: path.join(work, "migrate"),
    env: { ...process.env, DATABASE_URL: dbUrl },
    encoding: "utf8",
  });
  if (migrated.status !== 0) problems.push(`migrate: ${migrated.stderr || migrated.stdout}`);
  else rows.find((r) => r.name === "migrate").note = migrated.stdout.trim();

  const secrets = {
    INTERNAL_API_KEY: randomBytes(24).toString("base64url"),
    SECRET_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
  };
  for (const [name, spec] of Object.entries(RUNTIME)) {
    if (!spec.health || problems.length > 0) continue;
    const [node, ...nodeArgs] = spec.cmd;
    if (node !== "node") throw new Error(`${name}: the image's CMD does not start with node`);
    const env = {
      ...process.env,
      ...secrets,
      NODE_ENV: "production",
      // No load balancer to wait for here: SIGTERM closes at once (the drain is tested in e2e).
      SHUTDOWN_DRAIN_MS: "0",
      DATABASE_URL: dbUrl,
      QUEUE_PREFIX: `{${dbName}}`,
      NODE_OPTIONS: "",
    };
    for (const v of spec.ports) env[v] = String(await freePort());
    const url = `http://127.0.0.1:${env[spec.portVar]}${spec.health}`;
    const row = rows.find((r) => r.name === name);
    try {
      row.startMs = await startAndStop(name, nodeArgs, path.join(work, name), env, url);
      if (args.has("--compare")) {
        for (const v of spec.ports) env[v] = String(await freePort());
        const srcUrl = `http://127.0.0.1:${env[spec.portVar]}${spec.health}`;
        row.tsxMs = await startAndStop(
          name,
          ["--import", "tsx", "src/main.ts"],
          path.join(root, "apps", name),
          env,
          srcUrl,
        );
      }
    } catch (error) {
      problems.push(error.message);
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
  // The queue keys the apps created under this run's QUEUE_PREFIX.
  const { Redis } = createRequire(path.join(root, "apps/vote-ingest/package.json"))("ioredis");
  const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379", { lazyConnect: true });
  await redis
    .connect()
    .then(async () => {
      const keys = [];
      for await (const batch of redis.scanStream({ match: `{${dbName}}*`, count: 1000 })) keys.push(...batch);
      if (keys.length > 0) await redis.del(...keys);
    })
    .catch(() => {})
    .finally(() => redis.disconnect());
  const client = new pg.Client({ connectionString: baseUrl.replace(/\/[^/]*$/, "/postgres") });
  await client
    .connect()
    .then(() => client.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`))
    .catch(() => {})
    .finally(() => client.end().catch(() => {}));
}

for (const row of rows) {
  const parts = [`${row.name.padEnd(19)} ${row.mb.toFixed(1).padStart(5)} MB`];
  if (row.startMs !== undefined) parts.push(`health 200 after ${Math.round(row.startMs)} ms`);
  if (row.tsxMs !== undefined) parts.push(`(from source via tsx: ${Math.round(row.tsxMs)} ms)`);
  if (row.note) parts.push(row.note);
  say(parts.join("  "));
}
if (args.has("--json")) process.stdout.write(`${JSON.stringify(rows)}\n`);
if (problems.length > 0) {
  for (const p of problems) say(`FAIL ${p}`);
  process.exit(1);
}
say(`ok: every runtime folder under ${LIMIT_MB} MB, every app started from dist/ and answered 200`);
