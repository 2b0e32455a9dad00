/**
 * Per-token, per-endpoint rate limits in Redis: a fixed 60-second window that starts at the token's
 * first request (key `${prefix}rl:${endpoint}:${tokenHash}`, the count of requests, expiring with
 * the window). The requests of one event-loop turn share one Redis round trip: their keys go to one
 * Lua call (createBatcher, @botdir/batcher) that increments each and returns its count and remaining
 * milliseconds — one call per hash slot on a Redis Cluster. Every API replica counts in the same
 * keys, so a token's limit holds across replicas.
 *
 * When Redis is down or slower than `timeoutMs` (measured by withLoopTimeout: a reply that arrived
 * while our own event loop was busy wins over a late timer), the process counts the request itself
 * (the local fallback, as rate-limiter-flexible's insurance limiter): a fixed window per token and
 * endpoint in memory, with this replica's share of the limit (`localShare`, 1 / API_REPLICAS,
 * rounded up to whole requests). The decision carries `local: true` and is counted by the caller's
 * metrics. Redis's window holds a request once at most: a call that timed out may still be run by
 * Redis, so it is never sent again. A token's unconfirmed count that timed out (consumeExisting)
 * is awaited once more while PostgreSQL confirms the token: the request is decided from its late
 * reply, or counted locally without one, and a late reply that found no window opens it (consume).
 * Only when the process cannot count either (its table of local windows is full) does the limiter
 * fail open, the spec's last resort: the request goes through (and is still authenticated by the
 * caller). Both are logged without any key or token. Redis's count and the local count are
 * separate: a window counted locally is not added to Redis when it answers again.
 *
 * An unknown token never creates a key: the routes first call `consumeExisting`, which counts only
 * a window that already exists (the token was known when it was opened) and answers `new`
 * otherwise; the window is opened (`consume`) only once PostgreSQL has said the token is a bot's.
 */

import type { ServerResponse } from "node:http";
import { type BatchLimits, createBatcher, DEFAULT_BATCH_LIMITS } from "@botdir/batcher";
import { ApiError, MESSAGES } from "@botdir/schema";
import type { Clock, Logger, RedisClient } from "@botdir/service-kit";
import { describeError, groupBySlot, TimeoutError, withLoopTimeout } from "@botdir/service-kit";

export const LIMITED_ENDPOINTS = [
  "stats",
  "commands",
  "check",
  "votes",
  "deliveries",
  "redeliver",
  "recover",
] as const;
export type LimitedEndpoint = (typeof LIMITED_ENDPOINTS)[number];
export type RateLimits = Record<LimitedEndpoint, number>;

/**
 * Requests per token per minute (spec, Limits; the webhook delivery log and redelivery are ours:
 * docs/api.md). Redelivery is tight: each one can cost the receiver five requests. Recovery is the
 * tightest: one call can queue every undelivered vote of two weeks.
 */
export const DEFAULT_LIMITS: RateLimits = {
  stats: 60,
  commands: 10,
  check: 600,
  votes: 60,
  deliveries: 60,
  redeliver: 10,
  recover: 2,
};
export const WINDOW_SECONDS = 60;
/** How long a request waits for Redis before the limiter fails open. */
export const DEFAULT_LIMITER_TIMEOUT_MS = 50;
/** At most one fail-open log line per endpoint per interval; the rest are counted. */
const FAIL_OPEN_LOG_INTERVAL_MS = 10_000;
/** Local windows a process keeps while Redis fails; past this (and after a sweep) it fails open. */
export const LOCAL_WINDOWS_MAX = 100_000;

/**
 * KEYS: the window keys of a batch (a key may repeat: each occurrence counts). ARGV[1]: the window
 * in milliseconds; ARGV[1 + i]: '1' to open key i's window when it does not exist, '0' to count
 * it only if it exists (count 0 otherwise, nothing written). Returns count and remaining
 * milliseconds for each key, flattened. Counting an existing window takes two commands: PTTL
 * (which also says whether the key exists: -2) and INCR. A key left without an expiry (never
 * written so by us) gets the window, so no count can outlive it.
 */
const CONSUME_SCRIPT = `
local window = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local count = 0
  local ttl = 0
  if ARGV[i + 1] == '1' then
    count = redis.call('INCR', key)
    if count == 1 then
      ttl = -1
    else
      ttl = redis.call('PTTL', key)
    end
  else
    ttl = redis.call('PTTL', key)
    if ttl ~= -2 then
      count = redis.call('INCR', key)
    end
  end
  if count == 0 then
    ttl = 0
  elseif ttl < 0 then
    redis.call('PEXPIRE', key, window)
    ttl = window
  end
  out[2 * i - 1] = count
  out[2 * i] = ttl
end
return out
`;

/**
 * One key's window after a Lua call, or why its slot's call failed (the key is counted locally).
 * A call that timed out may still be run by Redis: `late` is its window when its reply comes after
 * all (count 0: it found no window and wrote nothing), null when it fails.
 */
type Counted = { count: number; ttlMs: number };
type WindowCount = Counted | { failed: unknown; late?: Promise<Counted | null> };

interface LimiterCommands {
  botdirConsumeWindows(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
}

export type RateDecision =
  | {
      kind: "allowed" | "limited";
      limit: number;
      remaining: number;
      resetSeconds: number;
      /** Milliseconds until the window resets, as Redis reported them (resetSeconds rounds up). */
      resetMs: number;
      /** Counted by this process (the local fallback) because Redis failed or was too slow. */
      local?: true;
    }
  /** Fail-open: the store did not answer in time, so nothing is known about the window. */
  | { kind: "unknown"; limit: number };

/** `consumeExisting` found no window: the token has not been counted (nor authenticated) yet. */
export interface NewWindow {
  kind: "new";
  limit: number;
  /**
   * Redis failed or was too slow for this request, and this process had no window of its own for
   * the token: once confirmed, `consume` given this answer decides the request from the late reply
   * of the call that timed out, or counts it locally. Redis may still run that call; a second one
   * would count the same request twice in the shared window.
   */
  countLocally?: true;
}

export interface RateLimiter {
  /**
   * Counts one request of `key` (the token hash) against `endpoint`, opening its window. Given the
   * request's own `new` answer of `consumeExisting` that came from the local fallback, decides it
   * from that call's late reply, or counts it locally. Never rejects.
   */
  consume(endpoint: LimitedEndpoint, key: string, existing?: NewWindow): Promise<RateDecision>;
  /**
   * Counts one request only if `key`'s window exists; `new` (nothing written) otherwise. For
   * requests whose token PostgreSQL has not confirmed yet. Never rejects.
   */
  consumeExisting(endpoint: LimitedEndpoint, key: string): Promise<RateDecision | NewWindow>;
}

export interface RateLimiterOptions {
  redis: RedisClient;
  /** Key prefix, e.g. "botdir:"; limiter keys are `${prefix}rl:${endpoint}:${tokenHash}`. */
  prefix: string;
  limits?: Partial<RateLimits>;
  timeoutMs?: number;
  logger: Logger;
  clock: Clock;
  /** Lua calls in flight and keys per call (default DEFAULT_BATCH_LIMITS). */
  batching?: BatchLimits;
  /**
   * This replica's share of each limit while Redis fails (0 < share <= 1; default 1): the local
   * fallback allows `ceil(limit × share)` requests per window.
   */
  localShare?: number;
  /** Local windows kept at most (default LOCAL_WINDOWS_MAX); beyond, the limiter fails open. */
  localWindowsMax?: number;
}

export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  const limits: RateLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const timeoutMs = options.timeoutMs ?? DEFAULT_LIMITER_TIMEOUT_MS;
  if (!("botdirConsumeWindows" in options.redis)) {
    // EVALSHA, with ioredis falling back to EVAL once after a Redis restart (NOSCRIPT).
    options.redis.defineCommand("botdirConsumeWindows", { lua: CONSUME_SCRIPT });
  }
  const redis = options.redis as RedisClient & LimiterCommands;
  const consumeWindows = createBatcher<{ key: string; open: boolean }, WindowCount>({
    ...(options.batching ?? DEFAULT_BATCH_LIMITS),
    isolateFailures: false,
    // One Lua call per batch on a single Redis; on a Cluster one per hash slot of the batch's
    // keys (a script's keys must share a slot), sent together, each under its own deadline: a
    // slot whose master does not answer (a failover, a slow node) falls back for its own keys only.
    run: async (inputs) => {
      const results = new Array<WindowCount>(inputs.length);
      const groups = groupBySlot(
        redis,
        inputs.map((x) => x.key),
      );
      await Promise.all(
        groups.map(async (group) => {
          const call = redis.botdirConsumeWindows(
            group.length,
            ...group.map((i) => (inputs[i] as { key: string }).key),
            WINDOW_SECONDS * 1000,
            ...group.map((i) => (inputs[i]?.open ? "1" : "0")),
          );
          try {
            const flat = await withLoopTimeout(call, timeoutMs);
            group.forEach((inputIndex, j) => {
              results[inputIndex] = { count: Number(flat[2 * j]), ttlMs: Number(flat[2 * j + 1]) };
            });
          } catch (error) {
            // Given up on, not necessarily failed: Redis may still run the call and reply.
            const late = error instanceof TimeoutError ? call.catch(() => null) : undefined;
            group.forEach((inputIndex, j) => {
              results[inputIndex] = {
                failed: error,
                late: late?.then((flat) =>
                  flat === null ? null : { count: Number(flat[2 * j]), ttlMs: Number(flat[2 * j + 1]) },
                ),
              };
            });
          }
        }),
      );
      return results;
    },
  });
  const lastLogged = new Map<string, { at: number; suppressed: number }>();
  const local = createLocalWindows({
    share: options.localShare ?? 1,
    maxWindows: options.localWindowsMax ?? LOCAL_WINDOWS_MAX,
    now: () => options.clock.now().getTime(),
  });

  function logFallback(endpoint: LimitedEndpoint, error: unknown, fallback: "local" | "open"): void {
    const now = options.clock.now().getTime();
    const logKey = `${fallback}:${endpoint}`;
    const state = lastLogged.get(logKey);
    if (state && now - state.at < FAIL_OPEN_LOG_INTERVAL_MS) {
      state.suppressed++;
      return;
    }
    options.logger.warn(
      {
        event: fallback === "local" ? "rate_limit_local_fallback" : "rate_limit_fail_open",
        endpoint,
        reason: error instanceof TimeoutError ? "timeout" : "store_error",
        err: describeError(error),
        suppressed: state?.suppressed ?? 0,
      },
      fallback === "local"
        ? "rate limiter unavailable; counting this replica's share locally"
        : "rate limiter unavailable; failing open",
    );
    lastLogged.set(logKey, { at: now, suppressed: 0 });
  }

  const windowKey = (endpoint: LimitedEndpoint, key: string) => `${options.prefix}rl:${endpoint}:${key}`;
  /** The failed Redis call behind each `new` answer of the local fallback, for its confirmed count. */
  const failures = new WeakMap<NewWindow, Extract<WindowCount, { failed: unknown }>>();

  async function count(endpoint: LimitedEndpoint, key: string, open: boolean) {
    const limit = limits[endpoint];
    let counted: WindowCount;
    try {
      counted = await consumeWindows({ key: windowKey(endpoint, key), open });
    } catch (error) {
      counted = { failed: error };
    }
    if (!("failed" in counted)) {
      return counted.count === 0 ? ({ kind: "new", limit } as const) : decide(limit, counted);
    }
    // A window this process has not opened is opened only for a confirmed token (`open`): an
    // unconfirmed one answers `new` (`countLocally`), and once PostgreSQL has confirmed the token
    // the caller's `consume` counts the request here too (see there for Redis's window).
    const localCount = local.count(endpoint, key, limit, open);
    if (localCount === "new") {
      const unconfirmed = { kind: "new", limit, countLocally: true } as const;
      failures.set(unconfirmed, counted);
      return unconfirmed;
    }
    return fellBack(endpoint, counted.failed, localCount, limit);
  }

  /** The decision of a window Redis counted (count ≥ 1). */
  function decide(limit: number, { count, ttlMs }: Counted): RateDecision {
    const resetSeconds = toSeconds(ttlMs);
    return count > limit
      ? { kind: "limited", limit, remaining: 0, resetSeconds, resetMs: ttlMs }
      : { kind: "allowed", limit, remaining: limit - count, resetSeconds, resetMs: ttlMs };
  }

  function fellBack(
    endpoint: LimitedEndpoint,
    error: unknown,
    counted: Exclude<ReturnType<typeof local.count>, "new">,
    limit: number,
  ): RateDecision {
    if (counted === "full") {
      logFallback(endpoint, error, "open");
      return { kind: "unknown", limit };
    }
    logFallback(endpoint, error, "local");
    return counted;
  }

  return {
    async consume(endpoint, key, existing) {
      const failure = existing?.countLocally ? failures.get(existing) : undefined;
      if (failure) {
        const limit = limits[endpoint];
        // Redis's window must hold the request once. The call that timed out may have been run
        // since (PostgreSQL confirmed the token meanwhile): its reply is awaited as long as a call
        // of our own. Counted there (≥ 1), the request is decided from it, as if it had come in
        // time; a window it found none of (0) is opened below like any confirmed request's.
        const late = failure.late && (await withLoopTimeout(failure.late, timeoutMs).catch(() => undefined));
        if (late && late.count > 0) return decide(limit, late);
        if (!late) {
          // No reply yet (or the call failed): counted here. Should the reply come and say the
          // call found no window, the request opens it then; a second call would count it twice.
          failure.late
            ?.then((reply) =>
              reply?.count === 0 ? consumeWindows({ key: windowKey(endpoint, key), open: true }) : null,
            )
            .catch(() => {});
          const counted = local.count(endpoint, key, limit, true);
          // Opening (`true`), the local count never answers "new".
          if (counted !== "new") return fellBack(endpoint, failure.failed, counted, limit);
        }
      }
      const decision = await count(endpoint, key, true);
      // Not reachable (an opened window counts at least 1); kept total for the type.
      return decision.kind === "new" ? { kind: "unknown", limit: decision.limit } : decision;
    },
    consumeExisting: (endpoint, key) => count(endpoint, key, false),
  };
}

/**
 * The local fallback's windows: a fixed window per endpoint and key, opened at its first local
 * count, allowing `ceil(limit × share)`. Expired windows are swept when the table is full; a table
 * still full after the sweep counts nothing more ("full": the caller fails open).
 */
function createLocalWindows(options: { share: number; maxWindows: number; now: () => number }) {
  const windows = new Map<string, { count: number; resetAt: number }>();
  const sweep = (now: number) => {
    for (const [key, window] of windows) if (window.resetAt <= now) windows.delete(key);
  };
  return {
    count(
      endpoint: LimitedEndpoint,
      key: string,
      limit: number,
      open: boolean,
    ): Extract<RateDecision, { kind: "allowed" | "limited" }> | "new" | "full" {
      const now = options.now();
      const id = `${endpoint}:${key}`;
      let window = windows.get(id);
      if (window !== undefined && window.resetAt <= now) {
        windows.delete(id);
        window = undefined;
      }
      if (window === undefined) {
        if (!open) return "new";
        if (windows.size >= options.maxWindows) sweep(now);
        if (windows.size >= options.maxWindows) return "full";
        window = { count: 0, resetAt: now + WINDOW_SECONDS * 1000 };
        windows.set(id, window);
      }
      window.count++;
      const share = Math.max(1, Math.ceil(limit * options.share));
      const resetMs = window.resetAt - now;
      const resetSeconds = toSeconds(resetMs);
      // The headers and a 429 describe what this replica allows meanwhile: its share.
      return window.count > share
        ? { kind: "limited", limit: share, remaining: 0, resetSeconds, resetMs, local: true }
        : {
            kind: "allowed",
            limit: share,
            remaining: share - window.count,
            resetSeconds,
            resetMs,
            local: true,
          };
    },
  };
}

export function toSeconds(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

/**
 * RateLimit-* headers of the IETF draft (draft-ietf-httpapi-ratelimit-headers-07 field names):
 * Limit, Remaining, Reset (seconds until the window resets) and Policy (`<limit>;w=60`). When the
 * limiter failed open only Limit and Policy are sent: nothing is known about the window.
 */
export function setRateLimitHeaders(res: ServerResponse, decision: RateDecision): void {
  res.setHeader("RateLimit-Policy", `${decision.limit};w=${WINDOW_SECONDS}`);
  res.setHeader("RateLimit-Limit", String(decision.limit));
  if (decision.kind === "unknown") return;
  res.setHeader("RateLimit-Remaining", String(decision.remaining));
  res.setHeader("RateLimit-Reset", String(decision.resetSeconds));
}

/** The 429 for a limited decision; the error middleware adds the Retry-After header. */
export function rateLimitedError(retryAfterSeconds: number): ApiError {
  return new ApiError("rate_limited", MESSAGES.rateLimited, { retryAfter: retryAfterSeconds });
}
