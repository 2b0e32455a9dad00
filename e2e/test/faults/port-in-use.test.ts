/**
 * A listener that cannot be bound: each app, started as a process with one of its ports already
 * taken, exits 1 with one line on stderr naming the variable and the port, and no stack trace
 * (README, "Configuration"). The api's METRICS_PORT is the second listener it binds.
 */
import { spawn } from "node:child_process";
import net from "node:net";
import { testRedisPrefix, testRedisUrl } from "@botdir/db/testing";
import { type AppName, baseEnv, freePort, freshKeys, REPO_ROOT } from "../../src/processes.js";
import { appEnv, useStores } from "../../src/stack.js";

const stores = useStores();

async function holdPort(): Promise<{ port: number; release: () => Promise<void> }> {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, resolve));
  const { port } = holder.address() as net.AddressInfo;
  return { port, release: () => new Promise((resolve) => holder.close(() => resolve())) };
}

/** Runs the app to its exit; resolves with the exit code and what it wrote to stderr. */
function runToExit(
  app: AppName,
  env: Record<string, string>,
): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", `apps/${app}/src/main.ts`], {
    cwd: REPO_ROOT,
    env: { ...baseEnv(), ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, stderr })));
}

const cases: [AppName, string, string[]][] = [
  ["api", "API_PORT", ["METRICS_PORT"]],
  ["api", "METRICS_PORT", ["API_PORT"]],
  ["vote-ingest", "INGEST_PORT", []],
  ["webhook-dispatcher", "DISPATCHER_PORT", []],
];

describe("a port that is already in use", () => {
  it.each(cases)(
    "when %s's %s is taken, then it exits 1 with one line naming the variable and the port",
    async (app, variable, others) => {
      const taken = await holdPort();
      try {
        const ports = Object.fromEntries(
          await Promise.all(others.map(async (o) => [o, String(await freePort())])),
        );
        const env = appEnv(
          { databaseUrl: stores.url, redisUrl: testRedisUrl(), keys: freshKeys() },
          { QUEUE_PREFIX: `{${testRedisPrefix().slice(0, -1)}}`, ...ports, [variable]: String(taken.port) },
        );
        const { code, stderr } = await runToExit(app, env);
        expect(code).toBe(1);
        expect(stderr).toBe(`${variable} ${taken.port} is already in use.\n`);
      } finally {
        await taken.release();
      }
    },
  );
});
