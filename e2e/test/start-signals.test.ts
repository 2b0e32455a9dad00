/**
 * `pnpm start` as a supervisor or `kill` stops it: a SIGTERM to the `pnpm` process stops
 * scripts/start.mjs and all three apps, and frees their ports, as Ctrl-C does. `pnpm start <app>`
 * runs one app alone with the same .env and steps.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { testRedisPrefix, testRedisUrl, useTestDatabase } from "@botdir/db/testing";
import { freePort, REPO_ROOT, waitFor } from "../src/processes.js";

const t = useTestDatabase();
const started: ChildProcess[] = [];

afterAll(() => {
  // Whatever a failed test left behind: the whole process group of each `pnpm start`.
  for (const child of started) {
    for (const pid of groupMembers(child.pid!)) killQuietly(pid);
  }
});

function killQuietly(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // gone already
  }
}

/** The live processes of process group `pgid` (Linux /proc), zombies left out. */
function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] !== "Z" && Number(fields[2]) === pgid) members.push(Number(entry));
    } catch {
      // exited while listed
    }
  }
  return members;
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

async function startPnpm(args: string[]) {
  const ports = {
    API_PORT: await freePort(),
    INGEST_PORT: await freePort(),
    DISPATCHER_PORT: await freePort(),
  };
  const { NODE_OPTIONS: _vm, INIT_CWD: _cwd, ...inherited } = process.env;
  const child = spawn("pnpm", ["start", ...args], {
    cwd: REPO_ROOT,
    detached: true, // its own process group, so every process it started can be found (and cleaned up)
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...inherited,
      NODE_ENV: "test",
      LOG_LEVEL: "warn",
      SHUTDOWN_DRAIN_MS: "0",
      DATABASE_URL: t.url,
      REDIS_URL: testRedisUrl(),
      QUEUE_PREFIX: testRedisPrefix(),
      INTERNAL_API_KEY: `internal-${randomBytes(16).toString("hex")}`,
      SECRET_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
      METRICS_PORT: String(await freePort()),
      ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    },
  });
  started.push(child);
  let output = "";
  child.stdout!.on("data", (chunk) => (output += chunk));
  child.stderr!.on("data", (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, ports, exited, output: () => output };
}

describe("pnpm start", () => {
  it("when the pnpm process gets SIGTERM, then start.mjs and all three apps stop and their ports are free", async () => {
    const run = await startPnpm([]);
    const ports = Object.values(run.ports);
    await waitFor(
      async () => (await Promise.all(ports.map(listening))).every(Boolean),
      "all three apps listening",
      120_000,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\n${run.output()}`);
    });
    const pgid = run.child.pid!;
    expect(groupMembers(pgid).length).toBeGreaterThanOrEqual(4); // pnpm, start.mjs, three apps

    process.kill(pgid, "SIGTERM"); // the pnpm process only, as a supervisor or `kill <pid>` does

    await waitFor(() => groupMembers(pgid).length === 0, "every process of pnpm start gone", 60_000);
    expect(await Promise.all(ports.map(listening))).toEqual([false, false, false]);
    await run.exited;
  }, 240_000);

  it("when an app is named (pnpm start vote-ingest), then that app alone runs with the same steps, and SIGTERM stops it", async () => {
    const run = await startPnpm(["vote-ingest"]);
    await waitFor(() => listening(run.ports.INGEST_PORT), "vote-ingest listening", 120_000).catch(
      (error: Error) => {
        throw new Error(`${error.message}\n${run.output()}`);
      },
    );
    expect(run.output()).toContain("applying migrations");
    expect(await listening(run.ports.API_PORT)).toBe(false);
    expect(await listening(run.ports.DISPATCHER_PORT)).toBe(false);
    const pgid = run.child.pid!;
    process.kill(pgid, "SIGTERM");
    await waitFor(() => groupMembers(pgid).length === 0, "every process of pnpm start gone", 60_000);
    expect(await listening(run.ports.INGEST_PORT)).toBe(false);
  }, 240_000);

  it("when an unknown app is named, then it exits 1 naming the apps", async () => {
    const run = await startPnpm(["nope"]);
    expect(await run.exited).toBe(1);
    expect(run.output()).toContain("api, vote-ingest, webhook-dispatcher");
  }, 120_000);
});
