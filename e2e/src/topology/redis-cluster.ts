/**
 * A 3-master Redis Cluster on fixed loopback ports (no replicas, nothing persisted), created with
 * `redis-cli --cluster create` as an operator would. A master can be SIGKILLed and started again
 * with its cluster config (same node id and slots), coming back empty as after a crash without
 * persistence. Also a single redis-server with the same interface, for the suite's debug mode.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { sleep, waitFor } from "../processes.js";
import type { Binaries } from "./binaries.js";
import { type Daemon, spawnDaemon } from "./daemon.js";

const run = promisify(execFile);

export interface RedisTopology {
  /** Environment the apps get: REDIS_CLUSTER_NODES (cluster) or REDIS_URL (single). */
  env: Record<string, string>;
  ports: number[];
  /** Port of the master that serves `key`'s slot. */
  masterOf(key: string): Promise<number>;
  /** SIGKILL of the server on `port`. */
  kill(port: number): Promise<void>;
  /** Starts it again (same port, same cluster config) and waits until the cluster is whole. */
  restart(port: number): Promise<void>;
  /** Stops every server and deletes the data directory. */
  destroy(): Promise<void>;
  logs(): Record<string, string>;
}

async function cli(binaries: Binaries, port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run(binaries.redisCli, ["-h", "127.0.0.1", "-p", String(port), ...args], {
    timeout: 10_000,
  });
  return stdout;
}

export async function startRedisCluster(binaries: Binaries, ports: number[]): Promise<RedisTopology> {
  const dir = mkdtempSync(join(tmpdir(), "botdir-topology-redis-"));
  const servers = new Map<number, Daemon>();
  const history: string[] = [];
  const start = async (port: number) => {
    const server = spawnDaemon(
      `redis-${port}`,
      binaries.redisServer,
      [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        // The cluster bus on port + 100, inside the suite's port range (Redis's default is + 10000).
        "--cluster-port",
        String(port + 100),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        join(dir, `nodes-${port}.conf`),
        "--dir",
        dir,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
      ],
      { cwd: dir },
    );
    servers.set(port, server);
    await waitFor(
      async () => {
        if (!server.alive())
          throw new Error(`redis-server on ${port} exited: ${server.output().slice(-1000)}`);
        return (await cli(binaries, port, "ping")).trim() === "PONG";
      },
      `redis-server on port ${port}`,
      15_000,
      50,
    );
  };
  const whole = () =>
    waitFor(
      async () => {
        for (const port of ports) {
          if (!/cluster_state:ok/.test(await cli(binaries, port, "cluster", "info"))) return false;
          // Every node sees every master connected, none failing.
          const nodes = await cli(binaries, port, "cluster", "nodes");
          if (/fail|disconnected/.test(nodes)) return false;
        }
        return true;
      },
      "cluster_state:ok on every node",
      30_000,
      100,
    );

  try {
    await Promise.all(ports.map(start));
    await run(
      binaries.redisCli,
      [
        "--cluster",
        "create",
        ...ports.map((p) => `127.0.0.1:${p}`),
        "--cluster-replicas",
        "0",
        "--cluster-yes",
      ],
      { timeout: 30_000 },
    );
    await whole();
  } catch (error) {
    for (const server of servers.values()) await server.stop("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }

  return {
    env: { REDIS_CLUSTER_NODES: ports.map((p) => `127.0.0.1:${p}`).join(",") },
    ports,
    async masterOf(key) {
      const slot = Number((await cli(binaries, ports[0] as number, "cluster", "keyslot", key)).trim());
      for (const line of (await cli(binaries, ports[0] as number, "cluster", "nodes")).split("\n")) {
        // <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges…>
        const fields = line.trim().split(" ");
        if (!fields[2]?.includes("master")) continue;
        const port = Number(/:(\d+)@/.exec(fields[1] ?? "")?.[1]);
        for (const range of fields.slice(8)) {
          const [from, to = from] = range.split("-").map(Number);
          if (from !== undefined && to !== undefined && slot >= from && slot <= to) return port;
        }
      }
      throw new Error(`no master serves slot ${slot} of ${key}`);
    },
    async kill(port) {
      const server = servers.get(port);
      if (!server) throw new Error(`no redis-server on ${port}`);
      await server.stop("SIGKILL");
      history.push(server.output());
    },
    async restart(port) {
      await start(port);
      await whole();
    },
    async destroy() {
      for (const server of servers.values()) await server.stop("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
    logs: () =>
      Object.fromEntries(
        [...servers].map(([port, server]) => [`redis-${port}`, [...history, server.output()].join("\n")]),
      ),
  };
}

/** One plain redis-server on `port` with the same interface (every key is on it). */
export async function startSingleRedis(binaries: Binaries, port: number): Promise<RedisTopology> {
  const dir = mkdtempSync(join(tmpdir(), "botdir-topology-redis-"));
  let server: Daemon | undefined;
  const start = async () => {
    const current = spawnDaemon(
      `redis-${port}`,
      binaries.redisServer,
      ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no"],
      { cwd: dir },
    );
    server = current;
    await waitFor(
      async () => {
        if (!current.alive()) throw new Error(`redis-server exited: ${current.output().slice(-1000)}`);
        return (await cli(binaries, port, "ping")).trim() === "PONG";
      },
      `redis-server on port ${port}`,
      15_000,
      50,
    );
  };
  await start();
  return {
    env: { REDIS_URL: `redis://127.0.0.1:${port}` },
    ports: [port],
    masterOf: async () => port,
    kill: async () => {
      await server?.stop("SIGKILL");
      await sleep(0);
    },
    restart: start,
    async destroy() {
      await server?.stop("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
    logs: () => ({ [`redis-${port}`]: server?.output() ?? "" }),
  };
}
