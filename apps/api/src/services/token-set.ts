/**
 * The valid token hashes (bots with a token that are approved), held in each API process so an
 * unknown token is refused with no I/O at all. The set is a filter, not the authority: a hash in it
 * still goes the normal way (PostgreSQL confirms the token on every request), so a revoked token is
 * refused at once even before its change reaches the set. Only "absent" short-circuits, and only
 * while the set is known to be fresh:
 *
 * - loaded in one query on a dedicated connection that LISTENs on `botdir_tokens` (the trigger of
 *   migration 20261122040000_token_notify announces every change at commit), reloaded in full after
 *   every (re)connection and every `reloadIntervalMs` as a safety net;
 * - the connection is pinged through its own channel every `pingIntervalMs`; a ping not back within
 *   `maxLagMs` makes the set "unknown" (and a connection silent for `reconnectAfterMs` is replaced).
 *   The bound is generous on purpose: under overload the event loop itself delays the ping, and a
 *   set that went "unknown" then would add a query to every refusal exactly when it hurts most;
 *   a late NOTIFY and the request it matters for wait in the same event loop anyway;
 * - a miss within `recentChangeMs` of the last change the set applied is "unknown" too.
 *
 * "unknown" sends the caller down today's path (a PostgreSQL lookup for every token), so a broken
 * listener never causes a false 401. The one window left: a token whose commit happened less than
 * the NOTIFY delivery delay (normally well under a millisecond on the same network) before its first
 * request reaches this process is refused once; docs/operations.md describes it.
 */
import { performance } from "node:perf_hooks";
import { describeError, type Logger } from "@botdir/service-kit";

export const TOKEN_CHANNEL = "botdir_tokens";
const PING = "ping";

/** What the set needs of a connection: a pg PoolClient or Client fits (main: `db.pool.connect()`). */
export interface ListenConnection {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
  on(event: "notification", listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: "error" | "end", listener: (error?: Error) => void): unknown;
  /** Gives the connection back (PoolClient.release); `destroy` closes it instead of pooling it. */
  release(destroy?: boolean | Error): void;
}

export type TokenLookup = "present" | "absent" | "unknown";

export interface TokenSet {
  /** "absent" only when the set is fresh and the hash is not a valid token (refuse with no I/O). */
  lookup(tokenHash: string): TokenLookup;
  /** Whether an "absent" answer can be trusted right now. */
  isFresh(): boolean;
  /** Connects, listens and loads; returns at once, keeps retrying in the background. */
  start(): void;
  /** Stops the timers and gives the connection back. */
  stop(): Promise<void>;
  /** Resolves once the set is fresh (tests, start-up logs). */
  whenFresh(): Promise<void>;
}

export interface TokenSetOptions {
  connect(): Promise<ListenConnection>;
  logger: Logger;
  reloadIntervalMs?: number;
  pingIntervalMs?: number;
  maxLagMs?: number;
  reconnectAfterMs?: number;
  reconnectDelayMs?: number;
  recentChangeMs?: number;
  /** Monotonic milliseconds (default performance.now); not the business clock. */
  now?: () => number;
}

export const TOKEN_SET_DEFAULTS = {
  reloadIntervalMs: 60_000,
  pingIntervalMs: 1_000,
  maxLagMs: 2_000,
  reconnectAfterMs: 10_000,
  reconnectDelayMs: 1_000,
  recentChangeMs: 1_000,
} as const;

const LOAD_SQL = "SELECT token_hash FROM bots WHERE token_hash IS NOT NULL AND status = 'approved'";

export function createTokenSet(options: TokenSetOptions): TokenSet {
  const o = { ...TOKEN_SET_DEFAULTS, ...stripUndefined(options) };
  const now = options.now ?? (() => performance.now());
  let hashes = new Set<string>();
  let connection: ListenConnection | null = null;
  let loaded = false;
  let stopped = true;
  /** Changes that arrived while a reload was running: applied again after it (idempotent). */
  let pending: string[] | null = null;
  let lastChangeAt = Number.NEGATIVE_INFINITY;
  let pingSentAt: number | null = null;
  let timers: NodeJS.Timeout[] = [];
  let retry: NodeJS.Timeout | null = null;
  let generation = 0;
  let waiters: (() => void)[] = [];

  const fresh = (): boolean =>
    loaded && connection !== null && (pingSentAt === null || now() - pingSentAt <= o.maxLagMs);

  function apply(payload: string): void {
    const colon = payload.indexOf(":");
    if (colon === -1) return;
    const removed = payload.slice(0, colon);
    const added = payload.slice(colon + 1);
    if (removed) hashes.delete(removed);
    if (added) hashes.add(added);
    lastChangeAt = now();
  }

  function onNotification(message: { channel: string; payload?: string }): void {
    if (message.channel !== TOKEN_CHANNEL) return;
    const payload = message.payload ?? "";
    if (payload === PING) {
      pingSentAt = null;
      return;
    }
    if (pending) pending.push(payload);
    apply(payload);
  }

  function drop(reason: string, error?: unknown): void {
    const current = connection;
    if (current === null) return;
    connection = null;
    loaded = false;
    pingSentAt = null;
    generation++;
    options.logger.warn(
      { event: "token_set_stale", reason, err: error === undefined ? undefined : describeError(error) },
      "token set not fresh; unknown tokens take the database path",
    );
    current.release(true);
    scheduleConnect();
  }

  function scheduleConnect(): void {
    if (stopped || retry !== null) return;
    retry = setTimeout(() => {
      retry = null;
      void connectAndLoad();
    }, o.reconnectDelayMs);
    retry.unref();
  }

  async function reload(conn: ListenConnection): Promise<void> {
    pending = [];
    try {
      const { rows } = await conn.query(LOAD_SQL);
      const next = new Set<string>();
      for (const row of rows as { token_hash: string }[]) next.add(row.token_hash);
      hashes = next;
      for (const payload of pending) apply(payload);
    } finally {
      pending = null;
    }
  }

  async function connectAndLoad(): Promise<void> {
    if (stopped || connection !== null) return;
    const mine = ++generation;
    let conn: ListenConnection;
    try {
      conn = await options.connect();
    } catch (error) {
      options.logger.warn(
        { event: "token_set_connect_failed", err: describeError(error) },
        "token set: no connection",
      );
      scheduleConnect();
      return;
    }
    if (stopped || mine !== generation) {
      conn.release(true);
      return;
    }
    connection = conn;
    conn.on("notification", onNotification);
    conn.on("error", (error) => {
      if (connection === conn) drop("connection_error", error);
    });
    conn.on("end", () => {
      if (connection === conn) drop("connection_end");
    });
    try {
      await conn.query(`LISTEN ${TOKEN_CHANNEL}`);
      await reload(conn);
    } catch (error) {
      if (connection === conn) drop("load_failed", error);
      return;
    }
    if (connection !== conn) return;
    loaded = true;
    options.logger.info({ event: "token_set_loaded", tokens: hashes.size }, "token set loaded");
    for (const resolve of waiters) resolve();
    waiters = [];
  }

  function ping(): void {
    const conn = connection;
    if (conn === null || !loaded) return;
    if (pingSentAt !== null) {
      if (now() - pingSentAt > o.reconnectAfterMs) drop("ping_timeout");
      return;
    }
    pingSentAt = now();
    conn.query("SELECT pg_notify($1, $2)", [TOKEN_CHANNEL, PING]).catch((error: unknown) => {
      if (connection === conn) drop("ping_failed", error);
    });
  }

  function periodicReload(): void {
    const conn = connection;
    if (conn === null || !loaded || pending !== null) return;
    reload(conn).catch((error: unknown) => {
      if (connection === conn) drop("reload_failed", error);
    });
  }

  return {
    lookup(tokenHash) {
      if (!fresh()) return "unknown";
      if (hashes.has(tokenHash)) return "present";
      return now() - lastChangeAt < o.recentChangeMs ? "unknown" : "absent";
    },
    isFresh: fresh,
    start() {
      if (!stopped) return;
      stopped = false;
      timers = [setInterval(ping, o.pingIntervalMs), setInterval(periodicReload, o.reloadIntervalMs)];
      for (const timer of timers) timer.unref();
      void connectAndLoad();
    },
    async stop() {
      stopped = true;
      for (const timer of timers) clearInterval(timer);
      timers = [];
      if (retry !== null) clearTimeout(retry);
      retry = null;
      const conn = connection;
      connection = null;
      loaded = false;
      generation++;
      if (conn !== null) {
        await conn.query(`UNLISTEN ${TOKEN_CHANNEL}`).catch(() => {});
        conn.release(true);
      }
    },
    whenFresh() {
      return fresh() ? Promise.resolve() : new Promise((resolve) => waiters.push(resolve));
    },
  };
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
