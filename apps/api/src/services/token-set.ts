/**
 * The valid token hashes (bots with a token that are approved), held in each API process so an
 * unknown token is refused without a database lookup. The set is a filter, not the authority: a
 * hash in it still goes the normal way (PostgreSQL confirms the token on every request), so a
 * revoked token is refused at once even before its change reaches the set. Only a miss can end in
 * a refusal, and only while the set is known to be fresh:
 *
 * - loaded in one query on a dedicated connection that LISTENs on `botdir_tokens` (the trigger of
 *   migration 20261122040000_token_notify announces every change at commit), reloaded in full after
 *   every (re)connection and every `reloadIntervalMs` as a safety net;
 * - the connection is pinged through its own channel every `pingIntervalMs`; a ping not back within
 *   `maxLagMs` makes the set "unknown" (and a connection silent for `reconnectAfterMs` is replaced).
 *   The bound is generous on purpose: under overload the event loop itself delays the ping, and a
 *   set that went "unknown" then would add a query to every refusal exactly when it hurts most.
 *
 * A miss ("missing") is not yet a refusal: the token may have been committed just before its first
 * request, its NOTIFY still on the way. confirmAbsent closes that window with a barrier: a
 * pg_notify on the same channel, sent after the request arrived, whose payload only this process
 * and this barrier use. PostgreSQL delivers a channel's notifications in commit order, so when the
 * barrier comes back every change committed before the request arrived has been applied, and a
 * second look is the answer. Barriers are shared: one in flight per process, at most one sent every
 * `barrierIntervalMs`, each answering every miss that arrived before it was sent (never one sent
 * earlier: it proves nothing about a request that came after it). A barrier not back within
 * `maxLagMs`, or a set that stops being fresh meanwhile, answers "unknown", and a late barrier
 * leaves the set not fresh until it is back (like a late ping).
 *
 * "unknown" sends the caller down the database path (a PostgreSQL lookup for the token), so a
 * broken or slow listener never causes a false 401. Control payloads (pings, barriers) carry no
 * colon, so they are never taken for a token change (`<old hash>:<new hash>`), and a process
 * ignores every one it did not send (other replicas', and the plain "ping" of older versions).
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { describeError, type Logger } from "@botdir/service-kit";

export const TOKEN_CHANNEL = "botdir_tokens";
/**
 * application_name of the LISTEN connection: `pg_stat_activity` on a promoted primary shows the
 * API processes that follow it (docs/scaling.md Failover).
 */
export const TOKEN_LISTEN_APPLICATION_NAME = "botdir-token-listen";
const NOTIFY_SQL = "SELECT pg_notify($1, $2)";

/** What the set needs of a connection: a pg PoolClient or Client fits (main: `db.pool.connect()`). */
export interface ListenConnection {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
  on(event: "notification", listener: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: "error" | "end", listener: (error?: Error) => void): unknown;
  /** Gives the connection back (PoolClient.release); `destroy` closes it instead of pooling it. */
  release(destroy?: boolean | Error): void;
}

/** The answer for a token: "absent" is a refusal (401), "unknown" the database path. */
export type TokenLookup = "present" | "absent" | "unknown";

export interface TokenSet {
  /**
   * With no I/O: "present" when a fresh set holds the hash, "missing" when it does not (only
   * confirmAbsent turns that into a refusal), "unknown" when the set is not fresh.
   */
  lookup(tokenHash: string): "present" | "missing" | "unknown";
  /**
   * For a "missing" hash: waits for a barrier sent after this call, then looks again. "absent"
   * only when the hash is still missing from a set that stayed fresh; never rejects.
   */
  confirmAbsent(tokenHash: string): Promise<TokenLookup>;
  /** Whether a miss can be trusted right now. */
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
  /** How late a ping or a barrier may come back (later: "unknown"). */
  maxLagMs?: number;
  reconnectAfterMs?: number;
  reconnectDelayMs?: number;
  /** The least time between two barriers this process sends. */
  barrierIntervalMs?: number;
  /** Monotonic milliseconds (default performance.now); not the business clock. */
  now?: () => number;
}

export const TOKEN_SET_DEFAULTS = {
  reloadIntervalMs: 60_000,
  pingIntervalMs: 1_000,
  maxLagMs: 2_000,
  reconnectAfterMs: 10_000,
  reconnectDelayMs: 1_000,
  barrierIntervalMs: 5,
} as const;

const LOAD_SQL = "SELECT token_hash FROM bots WHERE token_hash IS NOT NULL AND status = 'approved'";

/** Waiters of one barrier: each is told whether it came back in time on a fresh set. */
type BarrierWaiter = (cameBack: boolean) => void;

interface Barrier {
  payload: string;
  waiters: BarrierWaiter[];
  timeout: NodeJS.Timeout;
}

export function createTokenSet(options: TokenSetOptions): TokenSet {
  const o = { ...TOKEN_SET_DEFAULTS, ...stripUndefined(options) };
  const now = options.now ?? (() => performance.now());
  /** Names this process in its control payloads: no other replica answers them. */
  const processId = randomBytes(8).toString("hex");
  let hashes = new Set<string>();
  let connection: ListenConnection | null = null;
  let loaded = false;
  let stopped = true;
  /** Changes that arrived while a reload was running: applied again after it (idempotent). */
  let pending: string[] | null = null;
  let pingSentAt: number | null = null;
  let pingPayload = "";
  let controlSeq = 0;
  let timers: NodeJS.Timeout[] = [];
  let retry: NodeJS.Timeout | null = null;
  let generation = 0;
  let waiters: (() => void)[] = [];
  /** The barrier on its way back, and the misses waiting for the next one to be sent. */
  let barrier: Barrier | null = null;
  let nextWaiters: BarrierWaiter[] = [];
  /** Cancels the barrier scheduled for the waiting misses (a timer or an immediate). */
  let nextBarrier: (() => void) | null = null;
  let lastBarrierAt = Number.NEGATIVE_INFINITY;
  /** A barrier that timed out: the set is not fresh until it is back (a late ping's rule). */
  let lateBarrier: string | null = null;

  const fresh = (): boolean =>
    loaded &&
    connection !== null &&
    lateBarrier === null &&
    (pingSentAt === null || now() - pingSentAt <= o.maxLagMs);

  const controlPayload = (kind: "ping" | "barrier"): string => `${kind}-${processId}-${++controlSeq}`;

  function apply(payload: string): void {
    const colon = payload.indexOf(":");
    const removed = payload.slice(0, colon);
    const added = payload.slice(colon + 1);
    if (removed) hashes.delete(removed);
    if (added) hashes.add(added);
  }

  function onNotification(conn: ListenConnection, message: { channel: string; payload?: string }): void {
    if (connection !== conn || message.channel !== TOKEN_CHANNEL) return;
    const payload = message.payload ?? "";
    if (payload.includes(":")) {
      if (pending) pending.push(payload);
      apply(payload);
    } else if (pingSentAt !== null && payload === pingPayload) {
      pingSentAt = null;
    } else if (barrier !== null && payload === barrier.payload) {
      settleBarrier(fresh());
    } else if (payload === lateBarrier) {
      lateBarrier = null;
    }
  }

  /** Answers the barrier in flight, then sends the next one if misses are waiting for it. */
  function settleBarrier(cameBack: boolean): void {
    const done = barrier;
    if (done === null) return;
    barrier = null;
    clearTimeout(done.timeout);
    for (const waiter of done.waiters) waiter(cameBack);
    scheduleBarrier();
  }

  function scheduleBarrier(): void {
    if (barrier !== null || nextBarrier !== null || nextWaiters.length === 0) return;
    const wait = lastBarrierAt + o.barrierIntervalMs - now();
    // setImmediate even with no wait: the misses of one turn of the event loop share a barrier.
    if (wait > 0) {
      // A timer fires by the event loop's clock, taken when its turn began: up to a turn earlier
      // than `now()` says. So it looks again rather than sending, and waits for the rest if early.
      const timer = setTimeout(() => {
        nextBarrier = null;
        scheduleBarrier();
      }, wait);
      nextBarrier = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(sendBarrier);
      nextBarrier = () => clearImmediate(immediate);
    }
  }

  function sendBarrier(): void {
    nextBarrier = null;
    const conn = connection;
    const waiting = nextWaiters;
    nextWaiters = [];
    if (conn === null || !fresh()) {
      for (const waiter of waiting) waiter(false);
      return;
    }
    const payload = controlPayload("barrier");
    const timeout = setTimeout(() => {
      if (barrier?.payload !== payload) return;
      lateBarrier = payload;
      settleBarrier(false);
    }, o.maxLagMs);
    timeout.unref();
    barrier = { payload, waiters: waiting, timeout };
    lastBarrierAt = now();
    conn.query(NOTIFY_SQL, [TOKEN_CHANNEL, payload]).catch((error: unknown) => {
      if (connection === conn) drop("barrier_failed", error);
    });
  }

  /** Tells every miss waiting for a barrier that none will come back (the set is not fresh). */
  function abandonBarriers(): void {
    nextBarrier?.();
    nextBarrier = null;
    const waiting = nextWaiters;
    nextWaiters = [];
    settleBarrier(false);
    for (const waiter of waiting) waiter(false);
  }

  function drop(reason: string, error?: unknown): void {
    const current = connection;
    if (current === null) return;
    connection = null;
    loaded = false;
    pingSentAt = null;
    lateBarrier = null;
    generation++;
    abandonBarriers();
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
    conn.on("notification", (message) => onNotification(conn, message));
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
    pingPayload = controlPayload("ping");
    conn.query(NOTIFY_SQL, [TOKEN_CHANNEL, pingPayload]).catch((error: unknown) => {
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

  function lookup(tokenHash: string): "present" | "missing" | "unknown" {
    if (!fresh()) return "unknown";
    return hashes.has(tokenHash) ? "present" : "missing";
  }

  return {
    lookup,
    confirmAbsent(tokenHash) {
      const first = lookup(tokenHash);
      if (first !== "missing") return Promise.resolve(first);
      return new Promise<TokenLookup>((resolve) => {
        nextWaiters.push((cameBack) => {
          if (!cameBack) return resolve("unknown");
          const again = lookup(tokenHash);
          resolve(again === "missing" ? "absent" : again);
        });
        scheduleBarrier();
      });
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
      abandonBarriers();
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
