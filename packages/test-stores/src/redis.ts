/**
 * Private Redis servers for fault tests: one `redis-server`, or a Redis Cluster (masters, with or
 * without replicas), on spare ports, nothing persisted, torn down by their owner.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.js";
import { freePort } from "./ports.js";

const run = promisify(execFile);

export interface PrivateRedis {
  url: string;
  port: number;
  /** Graceful stop (SIGTERM); resolves when the process has exited. */
  stop(): Promise<void>;
  /** Hard stop (SIGKILL), like a crash; resolves when the process has exited. */
  kill(): Promise<void>;
  /** Starts it again on the same port. It comes back EMPTY: nothing is ever persisted. */
  restart(): Promise<void>;
  /** The running server's process id (benchmarks read its CPU time). */
  pid(): number | undefined;
}

/**
 * redis-server on 127.0.0.1:`port` with nothing persisted (`--save "" --appendonly no`, working
 * directory `dir`) and `args`: the process at once, and `ready` once it accepts
 * connections (rejected if it exits, fails to spawn, or is not ready within 10 s; its last output
 * is in the error).
 */
function spawnRedisServer(
  label: string,
  port: number,
  dir: string,
  args: string[] = [],
): { proc: ChildProcess; ready: Promise<void> } {
  const proc = spawn(
    "redis-server",
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      ...args,
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const ready = new Promise<void>((resolve, reject) => {
    let output = "";
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`${label} did not start on port ${port}: ${output.slice(-500)}`));
    }, 10_000);
    proc.stdout?.on("data", (chunk: Buffer) => {
      // Only the start-up output is looked at; later lines are read and dropped.
      if (output.length > 20_000) return;
      output += chunk.toString();
      if (output.includes("Ready to accept connections")) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    proc.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${label} exited with ${code}: ${output.slice(-500)}`));
    });
  });
  return { proc, ready };
}

/**
 * A private `redis-server` for fault tests (stop it, kill it, bring it back empty) without touching
 * the shared Redis. Needs `redis-server` on PATH. Nothing is persisted (`--save "" --appendonly no`),
 * so a restart is an empty Redis, as after a crash without persistence.
 */
export async function startRedisServer(options: { port?: number } = {}): Promise<PrivateRedis> {
  const port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), "botdir-redis-"));
  let child: ChildProcess | undefined;
  const killOnExit = () => child?.kill("SIGKILL");
  process.once("exit", killOnExit);

  const start = () => {
    mkdirSync(dir, { recursive: true }); // removed by stop/kill; a restart makes it again
    const { proc, ready } = spawnRedisServer("redis-server", port, dir);
    child = proc;
    return ready;
  };

  const terminate = (signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      const done = () => {
        rmSync(dir, { recursive: true, force: true });
        resolve();
      };
      const proc = child;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return done();
      proc.once("exit", done);
      proc.kill(signal);
    });

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: () => terminate("SIGTERM"),
    kill: () => terminate("SIGKILL"),
    async restart() {
      await terminate("SIGTERM");
      await start();
    },
    pid: () => child?.pid,
  };
}

/** `redis-cli -p port args…` on 127.0.0.1: its output. */
export async function redisCli(port: number, ...args: string[]): Promise<string> {
  return (await run("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], { timeout: 10_000 }))
    .stdout;
}

export interface PrivateRedisCluster {
  /** `host:port,…` of every node as clients reach it, replicas included (REDIS_CLUSTER_NODES). */
  nodes: string;
  /**
   * Every node's port as clients reach it (its proxy's, when proxied), the masters first (as
   * created). masterOf answers one of these.
   */
  ports: number[];
  /** With `proxied`: the fault proxy in front of each node (slow every link to the cluster). */
  proxies: FaultProxy[];
  /** SIGKILL of node `index`, like a crash. */
  kill(index: number): Promise<void>;
  /**
   * Starts node `index` again with its cluster config: a master without replicas takes its slots
   * back, empty; a master whose replica took over comes back as that replica's replica.
   */
  restart(index: number): Promise<void>;
  /**
   * Resolves when every running node reports `cluster_state:ok` and every slot is served by a
   * master that runs (after a failover: once the replica is promoted).
   */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** Port of the running master that serves `key`'s slot. */
  masterOf(key: string): Promise<number>;
  /** Whether node `index` runs. */
  running(index: number): boolean;
  stop(): Promise<void>;
}

/** The ports of the masters serving each slot range, from `cluster nodes` (failed ones left out). */
function mastersBySlot(nodesOutput: string): { port: number; from: number; to: number }[] {
  const ranges: { port: number; from: number; to: number }[] = [];
  for (const line of nodesOutput.split("\n")) {
    // <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges…>
    const fields = line.trim().split(" ");
    const flags = fields[2] ?? "";
    if (!flags.includes("master") || flags.includes("fail")) continue;
    const port = Number(/:(\d+)@/.exec(fields[1] ?? "")?.[1]);
    for (const range of fields.slice(8)) {
      if (range.startsWith("[")) continue; // a slot being migrated
      const [from, to = from] = range.split("-").map(Number);
      if (from !== undefined && to !== undefined) ranges.push({ port, from, to });
    }
  }
  return ranges;
}

/**
 * A private Redis Cluster of `masters` masters, each with `replicas` replicas (default none), on
 * free ports: `redis-server --cluster-enabled yes` each, joined by `redis-cli --cluster create`.
 * `cluster-node-timeout` is `nodeTimeoutMs` (default 2000): a master unreachable that long is
 * failed and, with replicas, one of them promoted. `requireFullCoverage: false` sets
 * `cluster-require-full-coverage no`: while a failed master's slots are unserved the other masters
 * keep serving theirs (Redis' default refuses every command with CLUSTERDOWN until a replica is
 * promoted). Nothing is persisted but each node's cluster config. Fails with one line naming the package when `redis-server` or `redis-cli` is missing.
 */
export async function startRedisCluster(
  options: {
    masters?: number;
    replicas?: number;
    nodeTimeoutMs?: number;
    /**
     * A fault proxy in front of every node, announced to clients (`cluster-announce-port`), so
     * that every client connection, redirections included, goes through one; the nodes' bus
     * stays direct.
     */
    proxied?: boolean;
    /** `cluster-require-full-coverage` (default true, Redis' default). */
    requireFullCoverage?: boolean;
  } = {},
): Promise<PrivateRedisCluster> {
  for (const tool of ["redis-server", "redis-cli"]) {
    await run(tool, ["--version"]).catch(() => {
      throw new Error(`${tool} is not installed: apt-get install -y redis-server (it brings redis-cli)`);
    });
  }
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 0;
  const count = masters * (1 + replicas);
  const dir = mkdtempSync(join(tmpdir(), "botdir-redis-cluster-"));
  // Each node's bus listens on port + 10000, so the port must leave room for it.
  const serverPorts: number[] = [];
  while (serverPorts.length < count) {
    const port = await freePort();
    if (port < 55_000 && !serverPorts.includes(port)) serverPorts.push(port);
  }
  const proxies: FaultProxy[] = [];
  if (options.proxied) for (const port of serverPorts) proxies.push(await startFaultProxy(port));
  const ports = options.proxied ? proxies.map((p) => p.port) : serverPorts;
  const children: (ChildProcess | undefined)[] = [];
  const killAll = () => {
    for (const c of children) c?.kill("SIGKILL");
  };
  process.once("exit", killAll);
  const running = (index: number) => {
    const proc = children[index];
    return proc !== undefined && proc.exitCode === null && proc.signalCode === null;
  };

  const start = (index: number) => {
    const port = serverPorts[index] as number;
    const announce = options.proxied
      ? [
          "--cluster-announce-port",
          String(ports[index]),
          "--cluster-announce-bus-port",
          String(port + 10_000),
        ]
      : [];
    const { proc, ready } = spawnRedisServer("redis-server (cluster)", port, dir, [
      "--cluster-enabled",
      "yes",
      "--cluster-config-file",
      `nodes-${port}.conf`,
      "--cluster-node-timeout",
      String(options.nodeTimeoutMs ?? 2000),
      ...(options.requireFullCoverage === false ? ["--cluster-require-full-coverage", "no"] : []),
      ...announce,
    ]);
    children[index] = proc;
    return ready;
  };

  const terminate = (index: number, signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      const proc = children[index];
      if (!proc || !running(index)) return resolve();
      proc.once("exit", () => resolve());
      proc.kill(signal);
    });

  const livePort = () => {
    const index = ports.findIndex((_, i) => running(i));
    if (index < 0) throw new Error("no node of the Redis Cluster runs");
    return serverPorts[index] as number;
  };

  async function waitHealthy(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = ports.filter((_, i) => running(i));
      const liveServers = serverPorts.filter((_, i) => running(i));
      const states = await Promise.all(
        liveServers.map((port) =>
          redisCli(port, "cluster", "info").then(
            (out) => /cluster_state:ok/.test(out),
            () => false,
          ),
        ),
      );
      let served = false;
      if (states.every(Boolean)) {
        const ranges = await redisCli(liveServers[0] as number, "cluster", "nodes").then(
          mastersBySlot,
          () => [],
        );
        const covered = ranges.reduce((n, r) => n + (live.includes(r.port) ? r.to - r.from + 1 : 0), 0);
        served = covered === 16384;
      }
      if (served) return;
      if (Date.now() > deadline)
        throw new Error(`Redis Cluster on ${ports.join(",")} did not become healthy`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  try {
    await Promise.all(ports.map((_, i) => start(i)));
    await run("redis-cli", [
      "--cluster",
      "create",
      ...serverPorts.map((p) => `127.0.0.1:${p}`),
      "--cluster-replicas",
      String(replicas),
      "--cluster-yes",
    ]);
    await waitHealthy(30_000);
    // Replicas that have not synced once never take over (their data counts as too old).
    const deadline = Date.now() + 30_000;
    for (;;) {
      const roles = await Promise.all(serverPorts.map((port) => redisCli(port, "info", "replication")));
      const syncing = roles.filter((r) => r.includes("role:slave") && !r.includes("master_link_status:up"));
      if (syncing.length === 0) break;
      if (Date.now() > deadline) throw new Error(`${syncing.length} Redis Cluster replicas did not sync`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } catch (error) {
    killAll();
    await Promise.all(proxies.map((p) => p.close()));
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    nodes: ports.map((p) => `127.0.0.1:${p}`).join(","),
    ports,
    proxies,
    kill: (index) => terminate(index, "SIGKILL"),
    async restart(index) {
      await terminate(index, "SIGTERM");
      await start(index);
    },
    waitHealthy,
    async masterOf(key) {
      const port = livePort();
      const slot = Number((await redisCli(port, "cluster", "keyslot", key)).trim());
      const found = mastersBySlot(await redisCli(port, "cluster", "nodes")).find(
        (r) => slot >= r.from && slot <= r.to,
      );
      if (!found) throw new Error(`no master serves slot ${slot} of ${key}`);
      return found.port;
    },
    running,
    async stop() {
      process.removeListener("exit", killAll);
      await Promise.all(ports.map((_, i) => terminate(i, "SIGTERM")));
      await Promise.all(proxies.map((p) => p.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
