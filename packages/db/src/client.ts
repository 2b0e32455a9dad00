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
  /**
   * A URL straight to PostgreSQL for sessions held across transactions (`connectDedicated`: the
   * API's LISTEN, the retention job's advisory lock), when `url` goes through a transaction-pooling
   * PgBouncer. Default `url`.
   */
  directUrl?: string;
  /**
   * Named prepared statements: `on` sends the hot statements' names (parsed once per
   * connection), `off` sends every statement unnamed (re-parsed each time; works through any
   * pooler), `auto` (default) is `off` when `directUrl` differs from `url` (a pooler in between)
   * and `on` otherwise, turning itself `off` for good the first time a name is unknown to, or
   * already taken on, the server connection (a pooler nobody declared).
   */
  preparedStatements?: PreparedStatements;
  /** Told once when `auto` turns named statements off. */
  onPreparedStatementsOff?: (reason: string) => void;
}

export type PreparedStatements = "auto" | "on" | "off";

export interface Db {
  prisma: PrismaClient;
  /** The same pool Prisma uses, for the few hot-path queries written in SQL. */
  pool: pg.Pool;
  /**
   * Opens a connection outside the pool, for a session held across transactions (the API's
   * LISTEN, the retention job's advisory lock): it never takes one of the `poolMax` connections
   * that requests wait for. `url` defaults to `directUrl` (a transaction-pooling PgBouncer would
   * hand the session's state to other clients). `release()` closes it. `applicationName` names
   * the session in `pg_stat_activity` (default `botdir`), so an operator (or the failover suite)
   * sees which server the API's LISTEN or the retention job is on.
   */
  connectDedicated(url?: string, options?: { applicationName?: string }): Promise<DedicatedConnection>;
  /** Whether statements are sent with their names now (`preparedStatements`). */
  namedStatements(): boolean;
  close(): Promise<void>;
}

/** A pg Client with the pool client's `release` (which here always closes it). */
export type DedicatedConnection = pg.Client & { release(destroy?: boolean | Error): void };

// BIGINT comes back as a string by default; server counts and ids fit in a JS safe integer
// (the API refuses unsafe integers), so parse them to numbers for the raw-SQL paths.
pg.types.setTypeParser(pg.types.builtins.INT8, (value: string) => Number(value));

/**
 * SQLSTATEs of a statement that never ran because of its name: 26000 (the server connection has
 * no statement of that name: a transaction pooler handed us another one) and 42P05 (the name is
 * already taken there). Safe to send again, unnamed.
 */
const STATEMENT_NAME_ERRORS = new Set(["26000", "42P05"]);

export function isStatementNameError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && STATEMENT_NAME_ERRORS.has(code);
}

type QueryArgs = [config: unknown, ...rest: unknown[]];

/** A plain query config object with a statement name (not a Submittable such as a cursor). */
function namedConfig(config: unknown): config is { name: string } {
  return (
    typeof config === "object" &&
    config !== null &&
    typeof (config as { name?: unknown }).name === "string" &&
    typeof (config as { submit?: unknown }).submit !== "function"
  );
}

function withoutName(config: { name: string }): object {
  const { name: _name, ...rest } = config;
  return rest;
}

/** The one place a PrismaClient is constructed. */
export function createDb(options: DbOptions): Db {
  const directUrl = options.directUrl ?? options.url;
  const mode = options.preparedStatements ?? "auto";
  let named = mode === "on" || (mode === "auto" && directUrl === options.url);
  function namesOff(error: unknown): boolean {
    if (mode !== "auto" || !named || !isStatementNameError(error)) return false;
    named = false;
    options.onPreparedStatementsOff?.(
      `PostgreSQL answered ${(error as { code: string }).code} to a named statement: a transaction pooler is in between; statements are sent unnamed from now on`,
    );
    return true;
  }
  // Every connection of the pool (Prisma's too) drops statement names while they are off. Prisma's
  // adapter sends its own statements unnamed already.
  class PoolClient extends pg.Client {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query() has a dozen overloads
    override query(...args: any[]): any {
      const [config, ...rest] = args as QueryArgs;
      if (!namedConfig(config)) {
        // biome-ignore lint/suspicious/noExplicitAny: forwarded unchanged
        return (super.query as any)(config, ...rest);
      }
      if (!named) {
        // biome-ignore lint/suspicious/noExplicitAny: forwarded unchanged
        return (super.query as any)(withoutName(config), ...rest);
      }
      // biome-ignore lint/suspicious/noExplicitAny: forwarded unchanged
      const result = (super.query as any)(config, ...rest);
      // Inside a transaction too: the first name error turns names off (the caller still gets it).
      if (typeof result?.catch === "function") result.catch((error: unknown) => namesOff(error));
      return result;
    }
  }
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
    Client: PoolClient,
  });
  // A statement sent on its own (outside a transaction) that failed only because of its name ran
  // nowhere: send it once more, unnamed. Inside a transaction the caller sees the error (the
  // transaction is aborted) and its retry finds names off.
  const poolQuery = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  pool.query = (async (...args: QueryArgs) => {
    try {
      return await poolQuery(...args);
    } catch (error) {
      namesOff(error);
      const retry =
        mode === "auto" && !named && isStatementNameError(error) && typeof args.at(-1) !== "function";
      if (retry && namedConfig(args[0])) return poolQuery(withoutName(args[0]), ...args.slice(1));
      throw error;
    }
  }) as typeof pool.query;
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
    namedStatements: () => named,
    async connectDedicated(url = directUrl, dedicated = {}) {
      const client = new pg.Client({
        ...session,
        connectionString: url,
        application_name: dedicated.applicationName ?? session.application_name,
      });
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

/**
 * Runs `work` in one transaction on a client of the pool: COMMIT when it resolves, ROLLBACK (its
 * own failure ignored) and rethrow when it throws; the client always goes back to the pool.
 */
export async function inTransaction<T>(db: Db, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
