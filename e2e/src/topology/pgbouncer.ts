/**
 * PgBouncer in transaction pooling mode in front of a PostgreSQL server, with the settings
 * docs/scaling.md tells operators to use. PgBouncer refuses to run as root: it then runs as the
 * `postgres` OS user.
 */
import { execFile } from "node:child_process";
import { chownSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { waitFor } from "../processes.js";
import type { Binaries } from "./binaries.js";
import { type Daemon, osUser, spawnDaemon } from "./daemon.js";

const run = promisify(execFile);

export interface PgBouncer {
  port: number;
  /** postgresql:// URL of `database` through PgBouncer. */
  url(database: string): string;
  ini: string;
  stop(): Promise<void>;
  output(): string;
}

export interface PgBouncerOptions {
  port: number;
  /** The PostgreSQL server behind it. */
  serverHost: string;
  serverPort: number;
  user: string;
  maxClientConn: number;
  defaultPoolSize: number;
}

/** The pgbouncer.ini of the suite (also the block docs/scaling.md shows). */
export function pgbouncerIni(options: PgBouncerOptions, dir: string): string {
  return [
    "[databases]",
    `* = host=${options.serverHost} port=${options.serverPort}`,
    "",
    "[pgbouncer]",
    "listen_addr = 127.0.0.1",
    `listen_port = ${options.port}`,
    `unix_socket_dir = ${dir}`,
    "auth_type = trust",
    `auth_file = ${join(dir, "userlist.txt")}`,
    "pool_mode = transaction",
    // The apps send these in their startup packet (node-postgres: statement_timeout, Prisma:
    // extra_float_digits, options); PgBouncer refuses a connection with an unknown one.
    "ignore_startup_parameters = extra_float_digits,statement_timeout,options",
    `max_client_conn = ${options.maxClientConn}`,
    `default_pool_size = ${options.defaultPoolSize}`,
    `pidfile = ${join(dir, "pgbouncer.pid")}`,
    "",
  ].join("\n");
}

export async function startPgBouncer(binaries: Binaries, options: PgBouncerOptions): Promise<PgBouncer> {
  const dir = mkdtempSync(join(tmpdir(), "botdir-topology-pgbouncer-"));
  const user = process.getuid?.() === 0 ? await osUser("postgres") : undefined;
  const ini = pgbouncerIni(options, dir);
  writeFileSync(join(dir, "pgbouncer.ini"), ini);
  writeFileSync(join(dir, "userlist.txt"), `"${options.user}" ""\n`);
  if (user) chownSync(dir, user.uid, user.gid);
  let daemon: Daemon | undefined;
  const url = (database: string) => `postgresql://${options.user}@127.0.0.1:${options.port}/${database}`;
  try {
    daemon = spawnDaemon("pgbouncer", binaries.pgbouncer, [join(dir, "pgbouncer.ini")], {
      cwd: dir,
      ...(user ? { user } : {}),
    });
    const started = daemon;
    await waitFor(
      async () => {
        if (!started.alive()) throw new Error(`pgbouncer exited: ${started.output().slice(-1000)}`);
        // A real query through it: PgBouncer listens and reaches the server.
        await run("psql", [url("postgres"), "-Atc", "SELECT 1"], { timeout: 5_000 });
        return true;
      },
      `pgbouncer on port ${options.port}`,
      15_000,
      100,
    );
  } catch (error) {
    await daemon?.stop("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const running = daemon;
  return {
    port: options.port,
    url,
    ini,
    output: () => running.output(),
    async stop() {
      await running.stop("SIGINT"); // immediate shutdown
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
