/**
 * Test support: private stores on spare ports for the suites that stop, kill, slow or fail them
 * over (e2e, the topology and failover suites, bench). The database fixtures of a test file
 * (its own database, seeded bots, metrics parsing) stay in `@botdir/db/testing`.
 */
export { type FaultProxy, startFaultProxy } from "./fault-proxy.js";
export {
  findPgBouncer,
  PGBOUNCER_FAILOVER_SETTINGS,
  type PgBouncerOptions,
  type PrivatePgBouncer,
  startPgBouncer,
} from "./pgbouncer.js";
export { freePort, listening } from "./ports.js";
export {
  findPostgresBin,
  type PostgresPair,
  type PostgresPairOptions,
  type PostgresServer,
  startPostgresPair,
} from "./postgres.js";
export { type PrivatePostgres, startPrivatePostgres } from "./private-postgres.js";
export {
  type PrivateRedis,
  type PrivateRedisCluster,
  redisCli,
  startRedisCluster,
  startRedisServer,
} from "./redis.js";
