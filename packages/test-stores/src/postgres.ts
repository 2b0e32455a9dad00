/**
 * A private PostgreSQL primary with a streaming standby (`initdb`, `pg_basebackup -R`, `pg_ctl`)
 * on spare ports in temporary directories, for failover tests: kill the primary's postmaster,
 * promote the standby, tear both down. Needs Debian's PostgreSQL server package (the binaries
 * under /usr/lib/postgresql/<version>/bin); run as root, the servers run as `postgres`.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { freePort, runningAsRoot } from "./ports.js";

const execFileAsync = promisify(execFile);

/** The newest PostgreSQL's bin directory under /usr/lib/postgresql, or null. */
export function findPostgresBin(): string | null {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, "bin", "pg_ctl")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(base, versions[0], "bin") : null;
}

export interface PostgresServer {
  port: number;
  dataDir: string;
  /** `postgresql://postgres@127.0.0.1:<port>/<database>`. */
  url(database?: string): string;
  /** The postmaster's process id, or undefined when it does not run. */
  pid(): number | undefined;
}

export interface PostgresPair {
  primary: PostgresServer;
  standby: PostgresServer;
  /** SIGKILL of the primary's postmaster (its backends exit on their own when they notice). */
  killPrimary(): Promise<void>;
  /** `pg_ctl promote` of the standby; resolves once it accepts writes (its duration, ms). */
  promoteStandby(): Promise<number>;
  /** Resolves once the standby has replayed everything the primary has flushed. */
  waitCaughtUp(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface PostgresPairOptions {
  /**
   * Commits wait for the standby to have flushed them (`synchronous_standby_names = '*'`, set on
   * the primary's command line only, so the promoted standby does not wait for a standby it lacks).
   * Default true: with asynchronous replication the last commits before a crash may be missing on
   * the standby, which is PostgreSQL's promise and not the apps'.
   */
  synchronous?: boolean;
  log?: (line: string) => void;
}

async function asPostgres(bin: string, args: string[], timeout = 120_000): Promise<string> {
  const options = runningAsRoot() ? { uid: uidOf("postgres"), gid: gidOf("postgres") } : {};
  const { stdout } = await execFileAsync(bin, args, { timeout, ...options });
  return stdout;
}

function passwdField(user: string, index: number): number {
  const line = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${user}:`));
  if (!line) throw new Error(`user ${user} does not exist: apt-get install -y postgresql`);
  return Number(line.split(":")[index]);
}
const uidOf = (user: string) => passwdField(user, 2);
const gidOf = (user: string) => passwdField(user, 3);

/** Settings of both servers: small, fast to start, nothing a crash test needs flushed to disk. */
const SERVER_SETTINGS = [
  "listen_addresses=127.0.0.1",
  "wal_level=replica",
  "max_wal_senders=5",
  "hot_standby=on",
  "shared_buffers=32MB",
  "max_connections=200",
  "fsync=off",
  "full_page_writes=off",
  "wal_receiver_status_interval=1s",
  "wal_retrieve_retry_interval=500ms",
  "log_min_messages=warning",
];

/**
 * A primary and its streaming standby on free ports. `stop()` stops both (whatever state they are
 * in) and removes their directories.
 */
export async function startPostgresPair(options: PostgresPairOptions = {}): Promise<PostgresPair> {
  const bin = findPostgresBin();
  if (!bin) throw new Error("PostgreSQL's server binaries are missing: apt-get install -y postgresql");
  const log = options.log ?? (() => {});
  const base = mkdtempSync(join(tmpdir(), "botdir-pg-pair-"));
  chmodSync(base, 0o777);
  const children = new Map<string, ChildProcess>();
  const killAll = () => {
    for (const child of children.values()) child.kill("SIGKILL");
  };
  process.once("exit", killAll);

  const server = (name: string, port: number): PostgresServer => ({
    port,
    dataDir: join(base, name),
    url: (database = "postgres") => `postgresql://postgres@127.0.0.1:${port}/${database}`,
    pid() {
      const child = children.get(name);
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
  });

  /** Runs `postgres -D dir` in the foreground (a child of this process: kill -9 hits the postmaster). */
  function run(s: PostgresServer, name: string, extra: string[]): Promise<void> {
    const args = ["-D", s.dataDir, "-p", String(s.port), "-k", base];
    for (const setting of [...SERVER_SETTINGS, ...extra]) args.push("-c", setting);
    const child = spawn(join(bin as string, "postgres"), args, {
      stdio: ["ignore", "ignore", "pipe"],
      ...(runningAsRoot() ? { uid: uidOf("postgres"), gid: gidOf("postgres") } : {}),
    });
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4000);
    });
    children.set(name, child);
    return waitAccepting(s, () => (child.exitCode !== null ? `exited: ${stderr.slice(-500)}` : null));
  }

  async function waitAccepting(s: PostgresServer, failed: () => string | null, timeoutMs = 60_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const problem = failed();
      if (problem) throw new Error(`PostgreSQL on ${s.port} ${problem}`);
      const client = new pg.Client({ connectionString: s.url(), connectionTimeoutMillis: 2_000 });
      client.on("error", () => {});
      const ok = await client.connect().then(
        () => true,
        () => false,
      );
      await client.end().catch(() => {});
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`PostgreSQL on ${s.port} did not start`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async function query<R extends object>(s: PostgresServer, sql: string): Promise<R[]> {
    const client = new pg.Client({ connectionString: s.url(), connectionTimeoutMillis: 2_000 });
    client.on("error", () => {});
    await client.connect();
    try {
      return (await client.query<R>(sql)).rows;
    } finally {
      await client.end().catch(() => {});
    }
  }

  const terminate = (name: string, signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      const child = children.get(name);
      if (!child || child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.kill(signal);
    });

  const primary = server("primary", await freePort());
  const standby = server("standby", await freePort());
  try {
    await asPostgres(join(bin, "initdb"), [
      "-D",
      primary.dataDir,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--no-sync",
      "--no-instructions",
    ]);
    // Replication connections from 127.0.0.1 (initdb's trust lines cover local and host "all").
    await asPostgres("/bin/sh", [
      "-c",
      `echo 'host replication all 127.0.0.1/32 trust' >> '${join(primary.dataDir, "pg_hba.conf")}'`,
    ]);
    await run(
      primary,
      "primary",
      options.synchronous === false ? [] : ["synchronous_standby_names=*", "synchronous_commit=on"],
    );
    await asPostgres(join(bin, "pg_basebackup"), [
      "-h",
      "127.0.0.1",
      "-p",
      String(primary.port),
      "-U",
      "postgres",
      "-D",
      standby.dataDir,
      "-R",
      "-X",
      "stream",
      "--no-sync",
    ]);
    await run(standby, "standby", []);
    log(`postgresql primary on ${primary.port}, standby on ${standby.port} (streaming)`);
    // The standby is connected and streaming before anything is written.
    const deadline = Date.now() + 30_000;
    while (
      (
        await query<{ n: number }>(
          primary,
          "SELECT count(*)::int AS n FROM pg_stat_replication WHERE state = 'streaming'",
        )
      )[0]?.n !== 1
    ) {
      if (Date.now() > deadline) throw new Error("the standby did not start streaming");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } catch (error) {
    killAll();
    rmSync(base, { recursive: true, force: true });
    throw error;
  }

  return {
    primary,
    standby,
    killPrimary: () => terminate("primary", "SIGKILL"),
    async promoteStandby() {
      const started = performance.now();
      await asPostgres(join(bin, "pg_ctl"), ["promote", "-D", standby.dataDir, "-w", "-t", "30"]);
      const deadline = Date.now() + 30_000;
      while ((await query<{ r: boolean }>(standby, "SELECT pg_is_in_recovery() AS r"))[0]?.r !== false) {
        if (Date.now() > deadline) throw new Error("the standby was not promoted");
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return performance.now() - started;
    },
    async waitCaughtUp(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const [row] = await query<{ lag: number | null }>(
          primary,
          "SELECT (pg_current_wal_flush_lsn() - replay_lsn)::float8 AS lag FROM pg_stat_replication",
        );
        if (row && row.lag !== null && row.lag <= 0) return;
        if (Date.now() > deadline) throw new Error("the standby did not catch up");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async stop() {
      process.removeListener("exit", killAll);
      // Fast shutdown; a postmaster already killed may have left backends: they exit on their own.
      await Promise.all([terminate("standby", "SIGINT"), terminate("primary", "SIGINT")]);
      rmSync(base, { recursive: true, force: true });
    },
  };
}
