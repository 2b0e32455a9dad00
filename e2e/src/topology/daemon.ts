/**
 * A server process (redis-server, pgbouncer) run in the foreground by the topology suite: its
 * output kept for the failure report, killed with the suite (also when the suite itself dies).
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface Daemon {
  name: string;
  output(): string;
  alive(): boolean;
  /** Sends `signal` (SIGKILL: a crash) and resolves once the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export interface OsUser {
  uid: number;
  gid: number;
}

/** The uid and gid of an OS user (servers that refuse to run as root run as `postgres`). */
export async function osUser(name: string): Promise<OsUser> {
  const [{ stdout: uid }, { stdout: gid }] = await Promise.all([
    run("id", ["-u", name]),
    run("id", ["-g", name]),
  ]);
  return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
}

export function spawnDaemon(
  name: string,
  file: string,
  args: string[],
  options: { cwd: string; user?: OsUser },
): Daemon {
  const child = spawn(file, args, {
    cwd: options.cwd,
    stdio: ["ignore", "pipe", "pipe"],
    ...(options.user ?? {}),
  });
  running.add(child);
  let output = "";
  const keep = (chunk: Buffer) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  child.on("error", (error) => keep(Buffer.from(`spawn error: ${error.message}\n`)));
  const exited = new Promise<void>((resolve) =>
    child.once("close", () => {
      running.delete(child);
      resolve();
    }),
  );
  const alive = () => child.exitCode === null && child.signalCode === null;
  return {
    name,
    output: () => output,
    alive,
    async stop(signal = "SIGTERM") {
      if (alive()) child.kill(signal);
      await exited;
    },
  };
}
