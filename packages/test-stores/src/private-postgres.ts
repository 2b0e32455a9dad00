/**
 * A private PostgreSQL server for fault tests: its own data directory (initdb as the `postgres`
 * OS user when we are root), its own port, fsync off. It can be stopped and started again with its
 * data kept, without touching the shared server.
 */
import { execFile } from "node:child_process";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./ports.js";
import { findPostgresBin } from "./postgres.js";

const run = promisify(execFile);

export interface PrivatePostgres {
  port: number;
  /** postgresql:// URL of database `name` on this server. */
  url(name?: string): string;
  /** Fast shutdown (existing connections are terminated); resolves when it is down. */
  stop(): Promise<void>;
  /** Starts it again on the same port with the same data. */
  start(): Promise<void>;
  /** Stops it (if running) and deletes its data directory. */
  destroy(): Promise<void>;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = findPostgresBin();
  if (!bin) throw new Error("PostgreSQL's server binaries are missing: apt-get install -y postgresql");
  const isRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), "botdir-pg-"));
  const data = join(dir, "data");
  const log = join(dir, "server.log");
  let uid: number | undefined;
  let gid: number | undefined;
  if (isRoot) {
    const { stdout } = await run("id", ["-u", "postgres"]);
    const { stdout: g } = await run("id", ["-g", "postgres"]);
    uid = Number(stdout.trim());
    gid = Number(g.trim());
    chownSync(dir, uid, gid);
  }
  // initdb refuses to run as root: run the server tools as the postgres OS user.
  const asOwner = (file: string, args: string[]) =>
    run(file, args, { ...(isRoot ? { uid, gid } : {}), cwd: dir, timeout: 60_000 });

  await asOwner(join(bin, "initdb"), [
    "-D",
    data,
    "-U",
    "postgres",
    "--auth=trust",
    "-N",
    "-E",
    "UTF8",
    "--locale=C",
  ]);
  const port = await freePort();
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    "-c listen_addresses=127.0.0.1",
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
    "-c max_connections=100",
  ].join(" ");
  let running = false;
  const start = async () => {
    await asOwner(join(bin, "pg_ctl"), ["-D", data, "-o", options, "-l", log, "-w", "-t", "30", "start"]);
    running = true;
  };
  const stop = async () => {
    if (!running) return;
    await asOwner(join(bin, "pg_ctl"), ["-D", data, "-m", "fast", "-w", "-t", "30", "stop"]);
    running = false;
  };
  await start();
  return {
    port,
    url: (name = "postgres") => `postgresql://postgres@127.0.0.1:${port}/${name}`,
    stop,
    start,
    async destroy() {
      await stop().catch(async () => {
        await asOwner(join(bin, "pg_ctl"), ["-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
      });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
