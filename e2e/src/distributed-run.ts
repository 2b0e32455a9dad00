/**
 * `pnpm test:distributed`: the e2e acceptance suite again, with the shared stores as an operator
 * who outgrew one box runs them — PostgreSQL behind a PgBouncer in transaction mode (the apps'
 * DATABASE_URL; DATABASE_DIRECT_URL beside it) and a 3-master Redis Cluster (REDIS_CLUSTER_NODES)
 * — both private to this run and torn down after it. Tests that stop or kill their own Redis keep
 * a private single server.
 */
import { spawn } from "node:child_process";
import { baseDatabaseUrl, TEST_ENV } from "@botdir/db/testing";
import { startPgBouncer, startRedisCluster } from "@botdir/test-stores";

function say(line: string): void {
  process.stdout.write(`[distributed] ${line}\n`);
}

const bouncer = await startPgBouncer({ targetUrl: baseDatabaseUrl() });
const cluster = await startRedisCluster({ masters: 3 }).catch(async (error: unknown) => {
  await bouncer.stop();
  throw error;
});
say(`PgBouncer 127.0.0.1:${bouncer.port} (transaction mode), Redis Cluster ${cluster.nodes}`);

const code = await new Promise<number>((resolve) => {
  const child = spawn("pnpm", ["--filter", "@botdir/e2e", "test", ...process.argv.slice(2)], {
    stdio: "inherit",
    env: {
      ...process.env,
      [TEST_ENV.poolerUrl]: bouncer.url("postgres"),
      [TEST_ENV.redisClusterNodes]: cluster.nodes,
    },
  });
  child.once("exit", (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0)));
});
await Promise.all([bouncer.stop(), cluster.stop()]);
process.exit(code);
