/**
 * A private PgBouncer for the suites that run the stores as a scaled-out deployment does, with the
 * settings docs/scaling.md gives operators (failover ones included), repointable as an operator
 * repoints it after a failover: `[databases]` rewritten, then `RELOAD`.
 */
import { spawn } from "node:child_process";
import { accessSync, chmodSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import pg from "pg";
import { freePort, listening, runningAsRoot } from "./ports.js";

/**
 * What docs/scaling.md and infra/components/pgbouncer/pgbouncer.ini set for a failover to be
 * followed in seconds: after a failed login to the old primary, PgBouncer tries the (repointed)
 * server again after `server_login_retry` instead of the 15 s default; a login that hangs is
 * given up after `server_connect_timeout`; a server connection idle for more than
 * `server_check_delay` is checked before it is handed out.
 */
export const PGBOUNCER_FAILOVER_SETTINGS = {
  server_login_retry: "1",
  server_connect_timeout: "3",
  server_check_delay: "1",
  server_fast_close: "1",
} as const;

export interface PrivatePgBouncer {
  /** `postgresql://` URL of `database` through the pooler. */
  url(database: string): string;
  port: number;
  /**
   * Points every `[databases]` entry at host:port (the promoted standby), as an operator's
   * failover does: the ini rewritten, then `RELOAD` on the admin console. Resolves once PgBouncer
   * has taken it (its duration, ms).
   */
  repoint(host: string, port: number): Promise<number>;
  /** Runs one statement on the admin console (`SHOW POOLS`, `RELOAD` …): its rows. */
  admin(sql: string): Promise<Record<string, unknown>[]>;
  /** PgBouncer's log so far. */
  log(): string;
  stop(): Promise<void>;
}

/** The PgBouncer binary: on PATH or where Debian's package puts it; null when not installed. */
export function findPgBouncer(): string | null {
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

export interface PgBouncerOptions {
  /** PostgreSQL behind it (any database; its user is the server user). */
  targetUrl: string;
  port?: number;
  poolSize?: number;
  /**
   * Entries in session mode beside the transaction-mode wildcard: name → database. What the
   * apps' DATABASE_DIRECT_URL names when it goes through the same PgBouncer (docs/scaling.md
   * Failover), so one RELOAD repoints both.
   */
  sessionDatabases?: Record<string, string>;
  /** With PGBOUNCER_FAILOVER_SETTINGS (default true). */
  failoverSettings?: boolean;
}

/**
 * A private PgBouncer in transaction mode in front of the PostgreSQL of `targetUrl` (every
 * database, as that URL's user), with the settings docs/scaling.md gives operators. Fails with one
 * line naming the package when `pgbouncer` is not installed. Run as root it drops to the
 * `postgres` user, as PgBouncer refuses to run as root.
 */
export async function startPgBouncer(options: PgBouncerOptions): Promise<PrivatePgBouncer> {
  const binary = findPgBouncer();
  if (!binary) throw new Error("pgbouncer is not installed: apt-get install -y pgbouncer");
  const target = new URL(options.targetUrl);
  const port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), "botdir-pgbouncer-"));
  chmodSync(dir, 0o777);
  const user = decodeURIComponent(target.username || "postgres");
  const ini = join(dir, "pgbouncer.ini");
  const logfile = join(dir, "pgbouncer.log");
  const write = (host: string, serverPort: string) => {
    const server = `host=${host} port=${serverPort} user=${user}`;
    writeFileSync(
      ini,
      [
        "[databases]",
        ...Object.entries(options.sessionDatabases ?? {}).map(
          ([name, database]) => `${name} = ${server} dbname=${database} pool_mode=session`,
        ),
        `* = ${server}`,
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        `listen_port = ${port}`,
        "unix_socket_dir =",
        "auth_type = any",
        `admin_users = ${user}`,
        "pool_mode = transaction",
        "ignore_startup_parameters = extra_float_digits,statement_timeout,options",
        "max_client_conn = 1000",
        `default_pool_size = ${options.poolSize ?? 10}`,
        "server_reset_query =",
        ...Object.entries(options.failoverSettings === false ? {} : PGBOUNCER_FAILOVER_SETTINGS).map(
          ([key, value]) => `${key} = ${value}`,
        ),
        `logfile = ${logfile}`,
        "",
      ].join("\n"),
    );
    chmodSync(ini, 0o644);
  };
  write(target.hostname, target.port || "5432");
  const child = spawn(binary, [...(runningAsRoot() ? ["-u", "postgres"] : []), ini], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  const deadline = Date.now() + 15_000;
  while (!(await listening(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`pgbouncer did not start on port ${port}: ${stderr.slice(-500)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const url = (database: string) => {
    const u = new URL(target.toString());
    u.host = `127.0.0.1:${port}`;
    u.pathname = `/${database}`;
    return u.toString();
  };
  async function admin(sql: string): Promise<Record<string, unknown>[]> {
    const client = new pg.Client({ connectionString: url("pgbouncer"), connectionTimeoutMillis: 5_000 });
    client.on("error", () => {});
    await client.connect();
    try {
      return (await client.query(sql)).rows;
    } finally {
      await client.end().catch(() => {});
    }
  }
  return {
    port,
    url,
    admin,
    async repoint(host, serverPort) {
      const started = performance.now();
      write(host, String(serverPort));
      await admin("RELOAD");
      return performance.now() - started;
    },
    log() {
      try {
        return readFileSync(logfile, "utf8");
      } catch {
        return "";
      }
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
