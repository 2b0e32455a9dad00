import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { PrismaClient } from "./generated/prisma/client.js";

export interface DbOptions {
  /** postgresql:// URL */
  url: string;
  /** Pool size; shared by Prisma and the raw hot-path queries. */
  poolMax?: number;
  /**
   * How long a request waits for a connection, new or free, before failing (ms; default 500, env
   * DB_CONNECT_TIMEOUT_MS in the apps). Keeps outages from hanging.
   */
  connectionTimeoutMs?: number;
  /** Server-side statement timeout (ms). */
  statementTimeoutMs?: number;
}

export interface Db {
  prisma: PrismaClient;
  /** The same pool Prisma uses, for the few hot-path queries written in SQL. */
  pool: pg.Pool;
  /**
   * Opens a connection outside the pool, for a session held for the process's life (the API's
   * LISTEN): it never takes one of the `poolMax` connections that requests wait for. `url`
   * defaults to the pool's (give a direct one when the pool goes through a transaction-pooling
   * PgBouncer, where LISTEN does not work). `release()` closes it.
   */
  connectDedicated(url?: string): Promise<DedicatedConnection>;
  close(): Promise<void>;
}

/** A pg Client with the pool client's `release` (which here always closes it). */
export type DedicatedConnection = pg.Client & { release(destroy?: boolean | Error): void };

// BIGINT comes back as a string by default; server counts and ids fit in a JS safe integer
// (the API refuses unsafe integers), so parse them to numbers for the raw-SQL paths.
pg.types.setTypeParser(pg.types.builtins.INT8, (value: string) => Number(value));

/** The one place a PrismaClient is constructed. */
export function createDb(options: DbOptions): Db {
  // What every connection of this process gets, pooled or dedicated.
  const session = {
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 500,
    statement_timeout: options.statementTimeoutMs ?? 5_000,
    query_timeout: (options.statementTimeoutMs ?? 5_000) + 1_000,
    application_name: "botdir",
  };
  const pool = new pg.Pool({
    ...session,
    connectionString: options.url,
    max: options.poolMax ?? 10,
    idleTimeoutMillis: 30_000,
  });
  // An idle client that loses its connection (PostgreSQL restarted) must not crash the process;
  // the pool discards it and the next query opens a new one.
  pool.on("error", () => {});
  // A client checked out but between queries (the outbox relay's transaction while it waits for
  // Redis, a Prisma transaction) has no pool listener: without this one, PostgreSQL going away at
  // that moment is an unhandled 'error' event that kills the process. Its next query fails
  // instead, and the pool drops the broken client on release.
  pool.on("connect", (client) => client.on("error", () => {}));
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  let closed = false;
  return {
    prisma,
    pool,
    async connectDedicated(url = options.url) {
      const client = new pg.Client({ ...session, connectionString: url });
      // Same reason as the pool's: a lost connection must not be an unhandled 'error' event; the
      // holder listens for 'error'/'end' itself.
      client.on("error", () => {});
      await client.connect();
      return Object.assign(client, {
        release() {
          client.end().catch(() => {});
        },
      });
    },
    async close() {
      if (closed) return;
      closed = true;
      await prisma.$disconnect().catch(() => {});
      await pool.end().catch(() => {});
    },
  };
}
