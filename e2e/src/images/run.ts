/**
 * `pnpm test:images`: what operators deploy, built and run as they run it, on podman (Debian's,
 * rootful, no registry). Installs podman, docker-compose and debootstrap when missing, builds or
 * reuses the local base images (docker/local/build-bases.sh), builds every target of
 * docker/Dockerfile with the local Node base as NODE_IMAGE, then:
 *   1. image facts: size and the app's own layers (< 30 MB), user node, tini as PID 1, no npm,
 *      npx, corepack, yarn or compiler, no package caches;
 *   2. a bad env ends each image with one line; migrate applies every migration to an empty
 *      database (twice: the second applies nothing);
 *   3. the three apps with a read-only root filesystem against live stores (containers of the
 *      local PostgreSQL and Redis images): seconds until each HEALTHCHECK passes, then an owner's
 *      tour (botctl in the vote-ingest container, commands, stats, a vote, a signed delivery to a
 *      receiver on the host, /check, the delivery log), then `podman stop` drains each;
 *   4. docker/compose.yml through Debian's docker-compose on podman's Docker API socket, with the
 *      `monitoring` profile: ~100 votes/s with webhooks and /check load while the dispatcher runs
 *      as 3 containers, one is killed (-9), one stopped (drain), one added back; every vote answered
 *      201 must reach the receiver, duplicates < 0.5 %, no API or vote-ingest request may fail,
 *      Prometheus scrapes every container with the shipped rules loaded;
 *   5. testcontainers for real: packages/db's and vote-ingest's jest suites with DOCKER_HOST on
 *      podman's socket (local PostgreSQL and Redis images, Ryuk disabled).
 * Prints one line per image (size, seconds to healthy) and one line of figures for the compose
 * scenario (then when its repeated deliveries arrived, and PostgreSQL's connections, longest
 * statement and wait events during its load); exits 1 listing every failed check. Options: --only=facts,tour,compose,testcontainers;
 * --reuse keeps targets already built.
 */
import { spawn, spawnSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { readdirSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { freePort } from "@botdir/test-stores";
import { call, REPO_ROOT, sleep, waitFor } from "../processes.js";
import { listenOnLoopback } from "../receivers.js";
import {
  BASES,
  buildBases,
  CONTAINERS_ENV,
  DOCKER_HOST,
  env,
  installTools,
  podman,
  podmanResult,
  startApiSocket,
} from "./podman.js";

const started = Date.now();
const elapsed = () => ((Date.now() - started) / 1000).toFixed(1);
const log = (line: string) => process.stdout.write(`[images ${elapsed()} s] ${line}\n`);
const problems: string[] = [];
const check = (ok: boolean, what: string) => {
  if (!ok) {
    problems.push(what);
    log(`FAILED: ${what}`);
  }
  return ok;
};

const only = process.argv
  .find((a) => a.startsWith("--only="))
  ?.slice(7)
  .split(",");
const phase = (name: string) => !only || only.includes(name);

const TAG = "ci";
const PREFIX = "localhost/botdir";
const APPS = ["api", "vote-ingest", "webhook-dispatcher"] as const;
const TARGETS = [...APPS, "migrate"] as const;
type Target = (typeof TARGETS)[number];
const image = (target: Target) => `${PREFIX}/${target}:${TAG}`;
const CA_BUNDLE = process.env.NODE_EXTRA_CA_CERTS ?? "/etc/ssl/certs/ca-certificates.crt";
const MB = 1024 * 1024;

/** A command run without blocking the event loop; rejects with its output's tail on failure. */
function runAsync(command: string, args: string[], what: string): Promise<void> {
  const child = spawn(command, args, { cwd: REPO_ROOT, env: env() });
  let out = "";
  const collect = (c: Buffer) => {
    out = (out + c.toString()).slice(-3000);
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${what} failed: ${out}`))));
  });
}

/** Every target, one after the other: the first builds the shared stages, the rest reuse them. */
async function buildTargets(): Promise<void> {
  for (const target of TARGETS) {
    const t0 = Date.now();
    const args = ["build", "--format", "docker", "-f", "docker/Dockerfile", "--target", target];
    args.push("--build-arg", `NODE_IMAGE=${BASES.node}`, "--secret", `id=npm_ca,src=${CA_BUNDLE}`);
    args.push("-t", image(target), ".");
    await runAsync("podman", args, `building ${target}`);
    log(`built ${image(target)} in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  }
}

const sizeOf = (ref: string) => Number(podman(["image", "inspect", "--format", "{{.Size}}", ref]));

/** Image facts: size, own layers, user, entrypoint, nothing an attacker would want. */
function imageFacts(target: Target): { size: number; own: number } {
  const size = sizeOf(image(target));
  const own = size - sizeOf(BASES.node);
  check(own < 30 * MB, `${target}: the app's own layers are ${(own / MB).toFixed(1)} MB (limit 30 MB)`);
  const user = podman(["image", "inspect", "--format", "{{.Config.User}}", image(target)]);
  check(user === "node", `${target}: runs as "${user}", not node`);
  const entrypoint = podman(["image", "inspect", "--format", "{{json .Config.Entrypoint}}", image(target)]);
  check(entrypoint === '["/usr/bin/tini","--"]', `${target}: entrypoint ${entrypoint}, not tini`);
  const probe = [
    "for c in npm npx corepack yarn yarnpkg pnpm gcc cc c++ g++ make; do command -v $c; done",
    "ls -d /usr/local/lib/node_modules /root/.npm /home/node/.npm /root/.cache /opt/yarn-* 2>/dev/null",
    "ls /var/cache/apt/archives/*.deb 2>/dev/null",
    "find /var/lib/apt/lists -type f ! -name lock 2>/dev/null",
    "exit 0",
  ].join("; ");
  const found = podman([
    "run",
    "--rm",
    "--read-only",
    "--no-healthcheck",
    "--entrypoint",
    "/bin/sh",
    image(target),
    "-c",
    probe,
  ]);
  check(found === "", `${target}: the runtime holds ${found.split("\n").join(", ")}`);
  return { size, own };
}

/** A bad env ends the image with one line naming the variable. */
function badEnv(target: Target): void {
  const r = podmanResult([
    "run",
    "--rm",
    "--read-only",
    "--no-healthcheck",
    "--network",
    "none",
    "-e",
    "DATABASE_URL=not a url",
    "-e",
    "INTERNAL_API_KEY=short",
    image(target),
  ]);
  const lines = `${r.stdout}${r.stderr}`.trim().split("\n").filter(Boolean);
  check(r.status !== 0, `${target}: a bad env exited ${r.status}`);
  check(
    lines.length === 1 && /DATABASE_URL|INTERNAL_API_KEY|SECRET_ENCRYPTION_KEY/.test(lines[0] ?? ""),
    `${target}: a bad env printed ${lines.length} lines: ${lines.slice(0, 3).join(" | ")}`,
  );
}

interface Stores {
  databaseUrl: string;
  /** psql in the PostgreSQL container: the first column of the first row. */
  query(sql: string): string;
  redisUrl: string;
  stop(): void;
}

/** PostgreSQL and Redis from the local store images, on the host's loopback (host network). */
async function startStores(): Promise<Stores> {
  const pgPort = await freePort();
  const redisPort = await freePort();
  const id = randomBytes(3).toString("hex");
  const pgName = `botdir-ci-pg-${id}`;
  const redisName = `botdir-ci-redis-${id}`;
  podman([
    "run",
    "-d",
    "--name",
    pgName,
    "--network",
    "host",
    "-e",
    "POSTGRES_HOST_AUTH_METHOD=trust",
    "-e",
    "POSTGRES_DB=botdir",
    BASES.postgres,
    "postgres",
    "-c",
    "listen_addresses=127.0.0.1",
    "-p",
    String(pgPort),
  ]);
  podman([
    "run",
    "-d",
    "--name",
    redisName,
    "--network",
    "host",
    BASES.redis,
    "redis-server",
    "--bind",
    "127.0.0.1",
    "--port",
    String(redisPort),
  ]);
  const databaseUrl = `postgresql://postgres@127.0.0.1:${pgPort}/botdir`;
  const query = (sql: string) =>
    podman([
      "exec",
      pgName,
      "psql",
      "-h",
      "127.0.0.1",
      "-p",
      String(pgPort),
      "-U",
      "postgres",
      "-d",
      "botdir",
      "-tAc",
      sql,
    ]);
  await waitFor(
    () => podmanResult(["exec", pgName, "pg_isready", "-h", "127.0.0.1", "-p", String(pgPort)]).status === 0,
    "PostgreSQL in its container",
    60_000,
    200,
  );
  return {
    databaseUrl,
    query,
    redisUrl: `redis://127.0.0.1:${redisPort}`,
    stop: () => podman(["rm", "-f", "-t", "0", pgName, redisName], { allowFail: true }) && undefined,
  };
}

/** migrate on an empty database, then again (nothing left to apply). */
function migrate(databaseUrl: string): boolean {
  for (const round of ["first", "second"]) {
    const r = podmanResult([
      "run",
      "--rm",
      "--read-only",
      "--no-healthcheck",
      "--network",
      "host",
      "-e",
      `DATABASE_URL=${databaseUrl}`,
      image("migrate"),
    ]);
    if (
      !check(
        r.status === 0,
        `migrate (${round} run) exited ${r.status}: ${(r.stderr || r.stdout).slice(-500)}`,
      )
    )
      return false;
  }
  return true;
}

interface RunningApp {
  name: string;
  target: Target;
  secondsToHealthy: number;
}

/** Starts one app's container (its name goes into `started` at once, for the cleanup). */
async function startApp(
  target: Target,
  name: string,
  appEnv: Record<string, string>,
  started: string[],
): Promise<RunningApp> {
  const args = ["run", "-d", "--name", name, "--read-only", "--network", "host"];
  for (const [k, v] of Object.entries(appEnv)) args.push("-e", `${k}=${v}`);
  const t0 = Date.now();
  podman([...args, image(target)]);
  started.push(name);
  await waitFor(
    () => podmanResult(["healthcheck", "run", name]).status === 0,
    `${name}'s HEALTHCHECK`,
    90_000,
    250,
  );
  return { name, target, secondsToHealthy: (Date.now() - t0) / 1000 };
}

const sign = (secret: string, body: Buffer) =>
  `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;

/** The apps from their images, read-only, against live stores; an owner's tour; a drain. */
async function tour(facts: Map<Target, { size: number; own: number }>): Promise<void> {
  const stores = await startStores();
  const names: string[] = [];
  const received: { headers: Record<string, string | string[] | undefined>; body: Buffer }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.statusCode = 204;
      res.end();
    });
  });
  const receiver = await listenOnLoopback(server);
  try {
    if (!migrate(stores.databaseUrl)) return;
    const applied = stores.query("SELECT count(*) FROM _prisma_migrations WHERE finished_at IS NOT NULL");
    const shipped = readdirSync(join(REPO_ROOT, "packages/db/prisma/migrations"), {
      withFileTypes: true,
    }).filter((d) => d.isDirectory()).length;
    check(Number(applied) === shipped, `migrate applied ${applied} of ${shipped} migrations`);
    const [apiPort, metricsPort, ingestPort, dispatcherPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    const internalKey = `ik_${randomBytes(16).toString("hex")}`;
    const common = {
      DATABASE_URL: stores.databaseUrl,
      REDIS_URL: stores.redisUrl,
      SECRET_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
      LOG_LEVEL: "warn",
      // As docker/compose.yml: on a busy machine opening a connection takes longer than 500 ms.
      DB_CONNECT_TIMEOUT_MS: "5000",
    };
    const id = randomBytes(3).toString("hex");
    const apps = await Promise.all([
      startApp(
        "api",
        `botdir-ci-api-${id}`,
        {
          ...common,
          API_PORT: String(apiPort),
          METRICS_PORT: String(metricsPort),
        },
        names,
      ),
      startApp(
        "vote-ingest",
        `botdir-ci-ingest-${id}`,
        {
          ...common,
          INGEST_PORT: String(ingestPort),
          INTERNAL_API_KEY: internalKey,
        },
        names,
      ),
      startApp(
        "webhook-dispatcher",
        `botdir-ci-dispatcher-${id}`,
        {
          ...common,
          DISPATCHER_PORT: String(dispatcherPort),
        },
        names,
      ),
    ]);
    for (const app of apps) {
      const fact = facts.get(app.target);
      const pid1 = podman(["exec", app.name, "cat", "/proc/1/cmdline"]).split("\0")[0];
      check(pid1 === "/usr/bin/tini", `${app.target}: PID 1 is ${pid1}`);
      const uid = podman(["exec", app.name, "id", "-u"]);
      check(uid === "1000", `${app.target}: runs as uid ${uid}`);
      const write = podmanResult(["exec", app.name, "touch", "/app/x"]);
      check(write.status !== 0, `${app.target}: the root filesystem is writable`);
      process.stdout.write(
        `image ${app.target}: ${((fact?.size ?? 0) / MB).toFixed(0)} MB (own layers ${((fact?.own ?? 0) / MB).toFixed(1)} MB), healthy in ${app.secondsToHealthy.toFixed(1)} s, read-only\n`,
      );
    }
    const migrateFact = facts.get("migrate");
    process.stdout.write(
      `image migrate: ${((migrateFact?.size ?? 0) / MB).toFixed(0)} MB (own layers ${((migrateFact?.own ?? 0) / MB).toFixed(1)} MB), applied every migration to an empty database\n`,
    );

    // The owner's tour: the operator creates the bot and its token with botctl in the container.
    const ingest = apps[1]?.name ?? "";
    const botctl = (...args: string[]) =>
      JSON.parse(podman(["exec", ingest, "node", "dist/botctl.js", ...args])) as Record<string, string>;
    const botId = String(100_000_000_000_000_000n + BigInt(Date.now()));
    check(botctl("bot", "create", botId, "--approve").status === "approved", "botctl bot create --approve");
    const token = botctl("token", "rotate", botId).token ?? "";
    const secret = botctl("webhook", "set", botId, `http://127.0.0.1:${receiver.port}/hook`).secret ?? "";
    const api = `http://127.0.0.1:${apiPort}/api/v1/bots/${botId}`;
    const auth = { authorization: token };
    const commands = await call(`${api}/commands`, {
      method: "PUT",
      headers: auth,
      body: { commands: [{ name: "ping", description: "Replies pong." }] },
    });
    check(commands.status === 200, `PUT commands answered ${commands.status}: ${commands.text}`);
    const stats = await call(`${api}/stats`, { method: "POST", headers: auth, body: { server_count: 42 } });
    check(stats.status === 200 || stats.status === 204, `POST stats answered ${stats.status}`);
    const vote = await call(`http://127.0.0.1:${ingestPort}/internal/v1/votes`, {
      method: "POST",
      headers: { authorization: internalKey },
      body: { bot_id: botId, user_id: "200000000000000001" },
    });
    check(vote.status === 201, `the vote answered ${vote.status}`);
    await waitFor(() => received.length > 0, "the signed delivery", 60_000, 100);
    const delivery = received[0];
    check(
      delivery?.headers["x-webhook-signature-256"] === sign(secret, delivery?.body ?? Buffer.alloc(0)),
      "the delivery's signature does not match the webhook secret",
    );
    check(delivery?.headers.authorization === secret, "the delivery's Authorization is not the secret");
    const voted = await call(`${api}/check?userId=200000000000000001`, { headers: auth });
    check((voted.body as { voted?: number } | null)?.voted === 1, `/check answered ${voted.text}`);
    const deliveryLog = await waitFor(
      async () => {
        const r = await call(`${api}/webhook/deliveries`, { headers: auth });
        return r.text.includes("delivered") ? r : undefined;
      },
      "the delivery log showing the delivery",
      30_000,
      250,
    );
    check(deliveryLog.status === 200, `the delivery log answered ${deliveryLog.status}`);
    log(
      `owner's tour: bot ${botId}, commands, stats, a vote delivered signed to the host, /check voted, delivery log`,
    );

    // podman stop: SIGTERM through tini, the app drains and exits 0 within its grace period.
    for (const app of apps) {
      const t0 = Date.now();
      podman(["stop", "-t", "30", app.name]);
      const code = podman(["inspect", "--format", "{{.State.ExitCode}}", app.name]);
      check(code === "0", `${app.target}: exited ${code} on podman stop`);
      log(`${app.target} drained and stopped in ${((Date.now() - t0) / 1000).toFixed(1)} s (exit ${code})`);
    }
  } finally {
    if (names.length > 0) podman(["rm", "-f", "-t", "0", ...names], { allowFail: true });
    stores.stop();
    await receiver.close();
  }
}

/** The compose project of the scenario; its containers carry it as a label. */
const PROJECT = "botdirci";

/** docker-compose's arguments and environment: the project, docker/compose.yml and the CI additions. */
function composeCommand(args: string[], composeEnv: Record<string, string>) {
  const files = ["-f", "docker/compose.yml", "-f", "e2e/src/images/compose.ci.yml"];
  return {
    argv: ["-p", PROJECT, ...files, ...args],
    options: { cwd: REPO_ROOT, env: { ...process.env, ...CONTAINERS_ENV, ...composeEnv, DOCKER_HOST } },
  };
}

function compose(args: string[], composeEnv: Record<string, string>) {
  const { argv, options } = composeCommand(args, composeEnv);
  return spawnSync("docker-compose", argv, { ...options, encoding: "utf8", maxBuffer: 64 * MB });
}

/** A field (`{{.Names}}`, `{{.Status}}`) of the project's containers, of one service or all. */
function projectContainers(format: string, options: { service?: string; all?: boolean } = {}): string[] {
  const args = [
    "ps",
    ...(options.all ? ["-a"] : []),
    "--filter",
    `label=com.docker.compose.project=${PROJECT}`,
  ];
  if (options.service) args.push("--filter", `label=com.docker.compose.service=${options.service}`);
  return podman([...args, "--format", format], { allowFail: true })
    .split("\n")
    .filter(Boolean);
}

/** docker-compose without blocking the event loop (the health ticker runs meanwhile). */
function composeOk(args: string[], composeEnv: Record<string, string>): Promise<string> {
  const { argv, options } = composeCommand(args, composeEnv);
  const child = spawn("docker-compose", argv, options);
  let out = "";
  const collect = (c: Buffer) => {
    out += c.toString();
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  return new Promise((resolve, reject) =>
    child.on("exit", (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`docker-compose ${args.join(" ")} exited ${code}: ${out.slice(-2000)}`)),
    ),
  );
}

/**
 * podman runs HEALTHCHECKs from systemd timers; without systemd (a container host, CI) nothing
 * runs them and compose's `service_healthy` never comes. This ticker runs each container's check
 * as the timer would, until stopped: every 2 s while the stack starts (so the conditions pass
 * soon), then every 10 s, the compose file's `interval` (`relax()`). Each check of an app is a
 * `podman exec` of a Node process (about 0.15 s of CPU): every 2 s for five app containers that
 * is a fifth of this 2-core machine, load the stack under test would not have with systemd.
 */
function healthTicker(): { relax(): void; stop(): void } {
  let stopped = false;
  let intervalMs = 2_000;
  const runCheck = (name: string) =>
    new Promise<void>((resolve) => {
      const child = spawn("podman", ["healthcheck", "run", name], { env: env(), stdio: "ignore" });
      child.on("exit", () => resolve());
      child.on("error", () => resolve());
    });
  const tick = async () => {
    while (!stopped) {
      await Promise.all(projectContainers("{{.Names}}").map(runCheck));
      await sleep(intervalMs);
    }
  };
  void tick();
  return {
    relax: () => {
      intervalMs = 10_000;
    },
    stop: () => {
      stopped = true;
    },
  };
}

/**
 * The errors of the API's and vote-ingest's `request failed` lines (what a 5xx answer logged),
 * counted and most frequent first, from the containers' logs.
 */
function failedRequestErrors(composeEnv: Record<string, string>): string[] {
  const r = compose(["logs", "--no-color", "api", "vote-ingest"], composeEnv);
  const counts = new Map<string, number>();
  for (const line of `${r.stdout ?? ""}`.split("\n")) {
    const brace = line.indexOf("{");
    if (brace < 0 || !line.includes('"request failed"')) continue;
    const service = line.slice(0, line.indexOf("|")).trim();
    try {
      const entry = JSON.parse(line.slice(brace)) as { err?: { message?: string; code?: unknown } };
      const key = `${service}: ${entry.err?.message ?? "?"}${entry.err?.code ? ` (${String(entry.err.code)})` : ""}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    } catch {
      // Not a JSON log line.
    }
  }
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([k, v]) => `${v} × ${k}`);
}

interface PgActivitySampler {
  /**
   * The samples taken from `from` to `to` (ms since the epoch) in one phrase: peak connections
   * (of max_connections), peak active, the longest-running statement, the most frequent wait
   * events of active backends.
   */
  summary(from: number, to: number): string;
  stop(): void;
}

interface PgActivitySample {
  at: number;
  connections: number;
  maxConnections: number;
  active: number;
  longestSeconds: number;
  waits: string[];
  oldestQuery: string;
}

/**
 * pg_stat_activity every 0.5 s, from one psql (`\watch`) in the PostgreSQL container: what the
 * client backends are doing while the load runs, so that a failed request can be told apart as
 * a pool waiting on slow statements (and on what they wait: WAL, locks, I/O) or on connections.
 */
function samplePgActivity(container: string): PgActivitySampler {
  const samples: PgActivitySample[] = [];
  const sql = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    count(*), current_setting('max_connections'), count(*) FILTER (WHERE state = 'active'),
    coalesce(max(extract(epoch FROM clock_timestamp() - query_start)) FILTER (WHERE state = 'active'), 0)::numeric(10, 2),
    coalesce(string_agg(wait_event_type || '/' || wait_event, ',') FILTER (WHERE state = 'active' AND wait_event IS NOT NULL), ''),
    coalesce(left(regexp_replace((array_agg(query ORDER BY query_start) FILTER (WHERE state = 'active'))[1], '\\s+', ' ', 'g'), 60), '')
  FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() \\watch 0.5\n`;
  const child = spawn(
    "podman",
    ["exec", "-i", container, "psql", "-U", "postgres", "-d", "botdir", "-AtF", "\t", "-P", "pager=off"],
    { env: env(), stdio: ["pipe", "pipe", "ignore"] },
  );
  child.on("error", () => {});
  child.stdin.end(sql);
  let pending = "";
  child.stdout.on("data", (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) {
      const [at, connections, maxConnections, active, longest, waits, query] = line.split("\t");
      if (!at || !/^\d+$/.test(at)) continue;
      samples.push({
        at: Number(at),
        connections: Number(connections),
        maxConnections: Number(maxConnections),
        active: Number(active),
        longestSeconds: Number(longest),
        waits: waits ? waits.split(",") : [],
        oldestQuery: query ?? "",
      });
    }
  });
  return {
    summary(from, to) {
      const within = samples.filter((x) => x.at >= from && x.at <= to);
      if (within.length === 0) return "no pg_stat_activity sample";
      const longest = within.reduce((a, b) => (b.longestSeconds > a.longestSeconds ? b : a));
      const waits = new Map<string, number>();
      for (const x of within) for (const w of x.waits) waits.set(w, (waits.get(w) ?? 0) + 1);
      const top = [...waits]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 4)
        .map(([w, c]) => `${w} ${c}`);
      return `${within.length} samples, peak ${Math.max(...within.map((x) => x.connections))} connections of ${longest.maxConnections}, peak ${Math.max(...within.map((x) => x.active))} active, longest statement ${longest.longestSeconds.toFixed(2)} s${longest.oldestQuery ? ` (${longest.oldestQuery.trim()})` : ""}, wait events of active backends: ${top.join(", ") || "none"}`;
    },
    stop() {
      if (child.exitCode === null) child.kill("SIGKILL");
    },
  };
}

const dispatchers = () => projectContainers("{{.Names}}", { service: "webhook-dispatcher" }).sort();

/** The compose stack scaled, killed and drained under load. */
async function composeScenario(): Promise<void> {
  const socket = await startApiSocket();
  const [apiPort, ingestPort, promPort, receiverPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const internalKey = `ik_${randomBytes(16).toString("hex")}`;
  const composeEnv = {
    POSTGRES_IMAGE: BASES.postgres,
    REDIS_IMAGE: BASES.redis,
    PROMETHEUS_IMAGE: BASES.prometheus,
    NODE_IMAGE: BASES.node,
    RECEIVER_IMAGE: BASES.node,
    BOTDIR_IMAGE_PREFIX: PREFIX,
    BOTDIR_IMAGE_TAG: TAG,
    POSTGRES_PASSWORD: randomBytes(12).toString("hex"),
    INTERNAL_API_KEY: internalKey,
    SECRET_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    API_PUBLISH_PORT: String(apiPort),
    INGEST_PUBLISH_PORT: String(ingestPort),
    PROMETHEUS_PUBLISH_PORT: String(promPort),
    RECEIVER_PUBLISH_PORT: String(receiverPort),
    DISPATCHER_REPLICAS: "3",
    LOG_LEVEL: "warn",
  };
  const receiver = `http://127.0.0.1:${receiverPort}`;
  const ticker = healthTicker();
  let sampler: PgActivitySampler | undefined;
  try {
    compose(["--profile", "monitoring", "down", "-v", "--remove-orphans", "-t", "0"], composeEnv);
    const t0 = Date.now();
    await composeOk(
      ["--profile", "monitoring", "up", "-d", "--no-build", "--scale", "webhook-dispatcher=3"],
      composeEnv,
    );
    const migrateState = projectContainers("{{.Status}}", { service: "migrate", all: true }).join(", ");
    check(/Exited \(0\)/.test(migrateState), `migrate did not complete before the apps: ${migrateState}`);
    const answers200 = (url: string, what: string, timeoutMs: number) =>
      waitFor(async () => (await call(url).catch(() => null))?.status === 200, what, timeoutMs, 500);
    await answers200(`http://127.0.0.1:${apiPort}/readyz`, "the API via compose", 120_000);
    await answers200(`http://127.0.0.1:${ingestPort}/readyz`, "vote-ingest via compose", 120_000);
    await answers200(`${receiver}/stats`, "the receiver", 60_000);
    check(dispatchers().length === 3, `${dispatchers().length} dispatcher containers, not 3`);
    log(
      `compose stack up in ${((Date.now() - t0) / 1000).toFixed(0)} s: postgres, redis, migrate (completed), api, vote-ingest, 3 webhook-dispatchers, prometheus, receiver`,
    );
    ticker.relax();

    // Ten webhook bots, created with botctl in the vote-ingest container.
    const ingestName = projectContainers("{{.Names}}", { service: "vote-ingest" })[0] ?? "";
    const bots: { id: string; token: string }[] = [];
    const secrets: Record<string, string> = {};
    for (let i = 0; i < 10; i++) {
      const id = String(300_000_000_000_000_000n + BigInt(Date.now()) * 100n + BigInt(i));
      const run = (...a: string[]) =>
        JSON.parse(podman(["exec", ingestName, "node", "dist/botctl.js", ...a])) as Record<string, string>;
      run("bot", "create", id, "--approve");
      const token = run("token", "rotate", id).token ?? "";
      secrets[id] = run("webhook", "set", id, `http://receiver:8080/hook/${id}`).secret ?? "";
      bots.push({ id, token });
    }
    await call(`${receiver}/secrets`, { method: "POST", body: secrets });

    // ~100 votes/s and 50 /check/s for 60 s; faults on the dispatchers meanwhile.
    const answered = new Set<string>();
    const failures = new Map<string, number>();
    const failedAt: number[] = [];
    const failure = (what: string) => {
      failedAt.push(Date.now());
      failures.set(what, (failures.get(what) ?? 0) + 1);
    };
    const failed = (prefix: string) =>
      [...failures].filter(([k]) => k.startsWith(prefix)).reduce((sum, [, v]) => sum + v, 0);
    let checks = 0;
    let n = 0;
    const loadMs = 60_000;
    sampler = samplePgActivity(projectContainers("{{.Names}}", { service: "postgres" })[0] ?? "");
    const loadStart = Date.now();
    const inflight = new Set<Promise<unknown>>();
    const faultAt = { kill: 0, stop: 0, added: 0 };
    const faults = (async () => {
      await sleep(15_000);
      const [first] = dispatchers();
      log(`kill -9 ${first}`);
      faultAt.kill = Date.now();
      await runAsync("podman", ["kill", "-s", "KILL", first ?? ""], "podman kill");
      await sleep(15_000);
      const second = dispatchers().find((d) => d !== first);
      log(`stop (drain) ${second}`);
      const s0 = Date.now();
      faultAt.stop = s0;
      // Not spawnSync: the load goes on while the dispatcher drains.
      await runAsync("podman", ["stop", "-t", "30", second ?? ""], "podman stop");
      log(
        `${second} drained in ${((Date.now() - s0) / 1000).toFixed(1)} s, exit ${podman(["inspect", "--format", "{{.State.ExitCode}}", second ?? ""])}`,
      );
      await sleep(5_000);
      faultAt.added = Date.now();
      await composeOk(
        [
          "up",
          "-d",
          "--no-build",
          "--no-deps",
          "--no-recreate",
          "--scale",
          "webhook-dispatcher=3",
          "webhook-dispatcher",
        ],
        composeEnv,
      );
      log(`dispatchers added back: ${dispatchers().length} running`);
    })();
    while (Date.now() - loadStart < loadMs) {
      const tick = Date.now();
      for (let i = 0; i < 10; i++) {
        const bot = bots[n % bots.length];
        if (!bot) break;
        const user = String(400_000_000_000_000_000n + BigInt(n));
        n += 1;
        const p = call(`http://127.0.0.1:${ingestPort}/internal/v1/votes`, {
          method: "POST",
          headers: { authorization: internalKey },
          body: { bot_id: bot.id, user_id: user },
          timeoutMs: 15_000,
        })
          .then((r) => {
            if (r.status === 201) answered.add(`${bot.id} ${user}`);
            else failure(`vote ${r.status}`);
          })
          .catch((error: unknown) => failure(`vote ${(error as Error).name}`));
        inflight.add(p);
        p.finally(() => inflight.delete(p));
      }
      for (let i = 0; i < 5; i++) {
        const bot = bots[(n + i) % bots.length];
        if (!bot) break;
        checks += 1;
        const p = call(
          `http://127.0.0.1:${apiPort}/api/v1/bots/${bot.id}/check?userId=${String(500_000_000_000_000_000n + BigInt(n))}`,
          {
            headers: { authorization: bot.token },
            timeoutMs: 15_000,
          },
        )
          .then((r) => {
            if (r.status !== 200) failure(`check ${r.status}`);
          })
          .catch((error: unknown) => failure(`check ${(error as Error).name}`));
        inflight.add(p);
        p.finally(() => inflight.delete(p));
      }
      await sleep(Math.max(0, 100 - (Date.now() - tick)));
    }
    await Promise.all(inflight);
    await faults;
    const loadEnd = Date.now();
    sampler.stop();
    let stats = { requests: 0, badSignature: 0, deliveries: [] as string[], repeatedAt: [] as number[] };
    await waitFor(
      async () => {
        stats = (await call(`${receiver}/stats`)).body as typeof stats;
        const seen = new Set(stats.deliveries);
        return [...answered].every((v) => seen.has(v)) || undefined;
      },
      "every vote answered 201 delivered",
      240_000,
      1_000,
    ).catch(() => undefined);
    const drainSeconds = (Date.now() - loadEnd) / 1000;
    const delivered = new Set(stats.deliveries);
    const missing = [...answered].filter((v) => !delivered.has(v)).length;
    const duplicates = stats.requests - stats.badSignature - stats.deliveries.length;
    const dupShare = stats.requests > 0 ? duplicates / Math.max(1, stats.deliveries.length) : 0;
    process.stdout.write(
      `compose scenario: ${n} votes sent, ${answered.size} answered 201, ${answered.size - missing} delivered, ${missing} missing, ${Math.max(0, duplicates)} duplicates (${(dupShare * 100).toFixed(2)} %), ${stats.badSignature} bad signatures, ${checks} checks (${failed("check")} failed), ${failed("vote")} votes failed, drained in ${drainSeconds.toFixed(1)} s after the load\n`,
    );
    // When the repeated deliveries arrived: between the kill -9 and the stop, between the stop and
    // the dispatcher added back, after it (or before any fault).
    const between = (from: number, to: number) =>
      stats.repeatedAt.filter((t) => t >= from && (to === 0 || t < to)).length;
    process.stdout.write(
      `compose scenario, repeated deliveries: ${between(0, faultAt.kill)} before the kill -9, ${between(faultAt.kill, faultAt.stop)} after it, ${between(faultAt.stop, faultAt.added)} after the stop (drain), ${between(faultAt.added, 0)} after the dispatcher added back\n`,
    );
    process.stdout.write(`compose scenario, PostgreSQL: ${sampler.summary(loadStart, loadEnd)}\n`);
    check(missing === 0, `${missing} votes answered 201 were not delivered`);
    check(stats.badSignature === 0, `${stats.badSignature} deliveries with a bad signature`);
    // A failed request is named with when it failed, what the apps logged for it and what
    // PostgreSQL's backends were doing in the 6 s before (a pool waits DB_CONNECT_TIMEOUT_MS, 5 s).
    if (failures.size > 0) {
      const failureList = [...failures].map(([k, v]) => `${k}: ${v}`).join(", ");
      const inPhase = (from: number, to: number) =>
        failedAt.filter((t) => t >= from && (to === 0 || t < to)).length;
      const first = Math.min(...failedAt);
      const last = Math.max(...failedAt);
      check(
        false,
        `requests to the API or vote-ingest failed (${failureList}): ${inPhase(0, faultAt.kill)} before the kill -9, ${inPhase(faultAt.kill, faultAt.stop)} after it, ${inPhase(faultAt.stop, faultAt.added)} after the stop (drain), ${inPhase(faultAt.added, 0)} after the dispatcher added back; the apps logged: ${failedRequestErrors(composeEnv).join("; ") || "nothing"}; PostgreSQL in the 6 s before them: ${sampler.summary(first - 6_000, last)}`,
      );
    }
    check(dupShare < 0.005, `duplicates ${(dupShare * 100).toFixed(2)} % (limit: under 0.5 %)`);

    // Prometheus scrapes every running app container with botdir's rules loaded.
    const running = projectContainers("{{.Names}}");
    const appCount = running.filter((c) => /api|vote-ingest|webhook-dispatcher/.test(c)).length;
    const targets = await waitFor(
      async () => {
        const r = await call(`http://127.0.0.1:${promPort}/api/v1/targets`);
        const active = (
          (r.body as { data?: { activeTargets?: { health: string }[] } })?.data?.activeTargets ?? []
        ).filter((t) => t.health === "up");
        return active.length >= appCount ? active.length : undefined;
      },
      `Prometheus scraping all ${appCount} app containers`,
      90_000,
      1_000,
    ).catch(() => 0);
    check(targets >= appCount, `Prometheus scrapes ${targets} of ${appCount} app containers`);
    const rules = await call(`http://127.0.0.1:${promPort}/api/v1/rules`);
    const groups =
      (rules.body as { data?: { groups?: { name: string; rules: unknown[] }[] } })?.data?.groups ?? [];
    const ruleCount = groups.reduce((sum, g) => sum + g.rules.length, 0);
    check(ruleCount > 0, "Prometheus has no botdir rules loaded");
    log(`Prometheus: ${targets} app containers up, ${groups.length} rule groups (${ruleCount} rules) loaded`);
  } finally {
    ticker.stop();
    sampler?.stop();
    compose(["--profile", "monitoring", "down", "-v", "--remove-orphans", "-t", "5"], composeEnv);
    await socket.stop();
  }
}

/** packages/db's and vote-ingest's suites through testcontainers on podman's socket. */
async function testcontainers(): Promise<void> {
  const socket = await startApiSocket();
  try {
    for (const filter of ["@botdir/db", "@botdir/vote-ingest"]) {
      const t0 = Date.now();
      const childEnv: NodeJS.ProcessEnv = {
        ...process.env,
        ...CONTAINERS_ENV,
        DOCKER_HOST,
        TESTCONTAINERS_RYUK_DISABLED: "true",
        TESTCONTAINERS_HOST_OVERRIDE: "127.0.0.1",
        TEST_POSTGRES_IMAGE: BASES.postgres,
        TEST_REDIS_IMAGE: BASES.redis,
      };
      delete childEnv.DATABASE_URL;
      delete childEnv.REDIS_URL;
      delete childEnv.TEST_CONTAINERS;
      const r = spawnSync("pnpm", ["--filter", filter, "test"], {
        cwd: REPO_ROOT,
        env: childEnv,
        encoding: "utf8",
        maxBuffer: 256 * MB,
      });
      const out = `${r.stdout}${r.stderr}`;
      const through = /\[testcontainers\] PostgreSQL /.test(out);
      const tests = /Tests:\s+(.*)/.exec(out)?.[1] ?? "no test line";
      check(through, `${filter}: the suite did not go through testcontainers`);
      check(r.status === 0, `${filter}: the suite through testcontainers failed:\n${out.slice(-4000)}`);
      process.stdout.write(
        `testcontainers ${filter}: ${tests} in ${((Date.now() - t0) / 1000).toFixed(0)} s (PostgreSQL and Redis in containers of ${BASES.postgres}, ${BASES.redis})\n`,
      );
    }
  } finally {
    await socket.stop();
  }
}

/** Each step's wall time, printed as one line at the end (and each as it ends). */
const steps: string[] = [];
async function step<T>(name: string, work: () => T | Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await work();
  } finally {
    const seconds = ((Date.now() - t0) / 1000).toFixed(0);
    steps.push(`${name} ${seconds} s`);
    log(`step ${name}: ${seconds} s`);
  }
}

async function main(): Promise<number> {
  await step("install tools", () => installTools(log));
  await step("node base", () => buildBases("node", log));
  // The store images (PostgreSQL, Redis, Prometheus) build while the app targets do: one waits on
  // the npm registry and compiles, the others on Debian's mirror and dpkg.
  const facts = new Map<Target, { size: number; own: number }>();
  // --reuse (working on this suite): keep the targets already built.
  const reuse =
    process.argv.includes("--reuse") &&
    TARGETS.every((t) => podmanResult(["image", "exists", image(t)]).status === 0);
  await step("targets and store bases", async () => {
    const results = await Promise.allSettled([
      step("store bases", () => buildBases("stores", log)),
      reuse ? Promise.resolve() : step("app targets", buildTargets),
    ]);
    for (const r of results) if (r.status === "rejected") throw r.reason;
  });
  if (phase("facts")) {
    await step("image facts and bad env", () => {
      for (const target of TARGETS) {
        facts.set(target, imageFacts(target));
        badEnv(target);
      }
    });
  }
  // A phase that throws is one failed check; the next phases still run.
  const failed = (error: unknown) => {
    check(false, error instanceof Error ? error.message : String(error));
  };
  if (phase("tour")) await step("tour", () => tour(facts).catch(failed));
  if (phase("compose")) await step("compose scenario", () => composeScenario().catch(failed));
  if (phase("testcontainers")) await step("testcontainers", () => testcontainers().catch(failed));
  return problems.length === 0 ? 0 : 1;
}

main()
  .catch((error: unknown) => {
    problems.push(error instanceof Error ? error.message : String(error));
    return 1;
  })
  .then((code) => {
    process.stdout.write(`test:images steps: ${steps.join(", ")}\n`);
    process.stdout.write(
      code === 0
        ? `test:images: ok in ${elapsed()} s\n`
        : `test:images: FAILED in ${elapsed()} s:\n${problems.map((p) => `  - ${p}`).join("\n")}\n`,
    );
    process.exit(code);
  });
