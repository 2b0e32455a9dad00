/**
 * Fault-test support: the real apps as child processes (`node --import tsx apps/<app>/src/main.ts`)
 * on free loopback ports, plus polling helpers. Every process started here is registered and
 * killed by `stopAll()` (call it in afterAll) and, as a last resort, when the test process exits.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { waitFor } from "@botdir/service-kit/testing";
import { freePort } from "@botdir/test-stores";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

export type AppName = "api" | "vote-ingest" | "webhook-dispatcher";

const PORT_VARIABLE: Record<AppName, string> = {
  api: "API_PORT",
  "vote-ingest": "INGEST_PORT",
  "webhook-dispatcher": "DISPATCHER_PORT",
};

const HEALTH_PATH: Record<AppName, string> = {
  api: "/api/health",
  "vote-ingest": "/health",
  "webhook-dispatcher": "/health",
};

export { freePort };

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls for a positive signal with a deadline (the one helper of every package's tests). */
export { waitFor };

export interface AppProcess {
  app: AppName;
  port: number;
  base: string;
  child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code (null after a signal) once the process has exited. */
  exited: Promise<number | null>;
  alive(): boolean;
  /** SIGKILL, like a crash or an OOM kill; resolves once the process is gone. */
  kill(): Promise<void>;
  /** SIGTERM; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** Resident set size of the process in bytes (Linux /proc). */
  rssBytes(): number;
  /**
   * Bytes the process has read so far through read(2) and its kin, sockets included (Linux
   * /proc/<pid>/io `rchar`): the difference over a request is at least the request bytes it read.
   */
  readBytes(): number;
  /**
   * Whether one of the process's open TCP sockets is the connection from local port `localPort` to
   * remote port `remotePort` (Linux /proc). Both ports: Linux gives the same ephemeral local port
   * to connections towards different destinations, so another process can hold a socket with the
   * same local port.
   */
  ownsConnection(localPort: number, remotePort: number): boolean;
}

const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Environment every app gets in fault tests; callers add DATABASE_URL, REDIS_URL and overrides. */
export function baseEnv(): Record<string, string> {
  const { NODE_OPTIONS: _jestVmModules, ...inherited } = process.env;
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(inherited)) if (v !== undefined) env[k] = v;
  // No drain by default (a test's SIGTERM should not wait 5 s); the drain tests set their own.
  return { ...env, NODE_ENV: "test", LOG_LEVEL: "warn", SHUTDOWN_DRAIN_MS: "0" };
}

export interface StartOptions {
  /** Run the build output (`node dist/main.js` in the app's folder, as the images do) instead of the source. */
  dist?: boolean;
  /** A fixed port instead of a free one. */
  port?: number;
}

/**
 * Starts `apps/<app>/src/main.ts` (or its `dist/main.js`) on a free port and waits until its
 * health endpoint answers (any status: a dependency may be down on purpose).
 */
export async function startApp(
  app: AppName,
  env: Record<string, string>,
  options: StartOptions = {},
): Promise<AppProcess> {
  const port = options.port ?? (await freePort());
  const command = options.dist ? ["dist/main.js"] : ["--import", "tsx", `apps/${app}/src/main.ts`];
  const child = spawn(process.execPath, command, {
    cwd: options.dist ? join(REPO_ROOT, "apps", app) : REPO_ROOT,
    // METRICS_PORT 0: the api's metrics listener takes a free port, so two api processes never collide.
    env: { ...baseEnv(), METRICS_PORT: "0", ...env, [PORT_VARIABLE[app]]: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(child);
  let output = "";
  const keep = (chunk: Buffer) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => {
      running.delete(child);
      resolve(code);
    }),
  );
  const alive = () => child.exitCode === null && child.signalCode === null;
  const base = `http://127.0.0.1:${port}`;
  const proc: AppProcess = {
    app,
    port,
    base,
    child,
    output: () => output,
    exited,
    alive,
    async kill() {
      if (alive()) child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (alive()) child.kill("SIGTERM");
      return exited;
    },
    rssBytes() {
      const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
      const kb = /VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1];
      if (!kb) throw new Error(`no VmRSS for pid ${child.pid}`);
      return Number(kb) * 1024;
    },
    readBytes() {
      const io = readFileSync(`/proc/${child.pid}/io`, "utf8");
      const rchar = /^rchar:\s+(\d+)$/m.exec(io)?.[1];
      if (!rchar) throw new Error(`no rchar for pid ${child.pid}`);
      return Number(rchar);
    },
    ownsConnection(localPort, remotePort) {
      const inodes = connectionInodes(localPort, remotePort);
      if (inodes.size === 0 || !alive()) return false;
      return readdirSync(`/proc/${child.pid}/fd`).some((fd) => {
        try {
          return inodes.has(readlinkSync(`/proc/${child.pid}/fd/${fd}`));
        } catch {
          return false; // closed meanwhile
        }
      });
    },
  };
  try {
    await waitFor(
      async () => {
        if (!alive()) throw new Error(`${app} exited: ${output.slice(-2000)}`);
        const res = await fetch(`${base}${HEALTH_PATH[app]}`, { signal: AbortSignal.timeout(2_000) });
        await res.arrayBuffer();
        return true;
      },
      `${app} to listen on ${port}`,
      // tsx compiles the app on start: seconds on an idle machine, far more beside other suites.
      90_000,
      100,
    );
  } catch (error) {
    await proc.kill();
    throw new Error(`${(error as Error).message}\n${output.slice(-2000)}`);
  }
  return proc;
}

/**
 * The `socket:[inode]` names of the TCP sockets from local port `localPort` to remote port
 * `remotePort` (/proc/net/tcp, tcp6).
 */
function connectionInodes(localPort: number, remotePort: number): Set<string> {
  const hex = (port: number) => `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields[1]?.endsWith(hex(localPort)) && fields[2]?.endsWith(hex(remotePort))) {
        inodes.add(`socket:[${fields[9]}]`);
      }
    }
  }
  return inodes;
}

/** Kills every app process this file started that is still running. */
export async function stopAll(): Promise<void> {
  await Promise.all(
    [...running].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGKILL");
        }),
    ),
  );
}

/** A fresh 32-byte SECRET_ENCRYPTION_KEY (hex) and a 32-character INTERNAL_API_KEY. */
export function freshKeys(): { encryptionKey: Buffer; encryptionKeyHex: string; internalKey: string } {
  const encryptionKey = randomBytes(32);
  return {
    encryptionKey,
    encryptionKeyHex: encryptionKey.toString("hex"),
    internalKey: `ik_${randomBytes(16).toString("hex")}`,
  };
}

/** fetch with a deadline; returns status, parsed JSON (or null) and the elapsed time. */
export async function call(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown; timeoutMs?: number } = {},
): Promise<{ status: number; body: unknown; text: string; ms: number; headers: Headers }> {
  const started = Date.now();
  const headers = {
    ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    ...init.headers,
  };
  const res = await fetch(url, {
    method: init.method ?? "GET",
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: AbortSignal.timeout(init.timeoutMs ?? 10_000),
  });
  const text = await res.text();
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  return { status: res.status, body, text, ms: Date.now() - started, headers: res.headers };
}
