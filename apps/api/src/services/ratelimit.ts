/**
 * Per-token, per-endpoint rate limits in Redis (rate-limiter-flexible, fixed 60-second window that
 * starts at the token's first request). One Redis round trip per request (an EVALSHA of the
 * library's INCR+PTTL script). When Redis is down or slower than `timeoutMs`, the limiter fails
 * open: the request goes through (and is still authenticated by the caller), and the event is
 * logged without any key or token.
 */
import type { Clock, Logger } from "@botdir/schema";
import { ApiError, describeError, MESSAGES, TimeoutError, withTimeout } from "@botdir/schema";
import type { Response } from "express";
import type { Redis } from "ioredis";
import { RateLimiterRedis, RateLimiterRes } from "rate-limiter-flexible";

export const LIMITED_ENDPOINTS = ["stats", "commands", "check", "votes"] as const;
export type LimitedEndpoint = (typeof LIMITED_ENDPOINTS)[number];
export type RateLimits = Record<LimitedEndpoint, number>;

/** Requests per token per minute (spec, Limits). */
export const DEFAULT_LIMITS: RateLimits = { stats: 60, commands: 10, check: 600, votes: 60 };
export const WINDOW_SECONDS = 60;
/** How long a request waits for Redis before the limiter fails open. */
export const DEFAULT_LIMITER_TIMEOUT_MS = 50;
/** At most one fail-open log line per endpoint per interval; the rest are counted. */
const FAIL_OPEN_LOG_INTERVAL_MS = 10_000;

export type RateDecision =
  | { kind: "allowed" | "limited"; limit: number; remaining: number; resetSeconds: number }
  /** Fail-open: the store did not answer in time, so nothing is known about the window. */
  | { kind: "unknown"; limit: number };

export interface RateLimiter {
  /** Counts one request of `key` (the token hash) against `endpoint`. Never rejects. */
  consume(endpoint: LimitedEndpoint, key: string): Promise<RateDecision>;
}

export interface RateLimiterOptions {
  redis: Redis;
  /** Key prefix, e.g. "botdir:"; limiter keys are `${prefix}rl:${endpoint}:${tokenHash}`. */
  prefix: string;
  limits?: Partial<RateLimits>;
  timeoutMs?: number;
  logger: Logger;
  clock: Clock;
}

export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  const limits: RateLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const timeoutMs = options.timeoutMs ?? DEFAULT_LIMITER_TIMEOUT_MS;
  const limiters = Object.fromEntries(
    LIMITED_ENDPOINTS.map((endpoint) => [
      endpoint,
      new RateLimiterRedis({
        storeClient: options.redis,
        keyPrefix: `${options.prefix}rl:${endpoint}`,
        points: limits[endpoint],
        duration: WINDOW_SECONDS,
        // Do not queue commands while disconnected: fail open at once.
        rejectIfRedisNotReady: true,
      }),
    ]),
  ) as Record<LimitedEndpoint, RateLimiterRedis>;
  const lastLogged = new Map<LimitedEndpoint, { at: number; suppressed: number }>();

  function logFailOpen(endpoint: LimitedEndpoint, error: unknown): void {
    const now = options.clock.now().getTime();
    const state = lastLogged.get(endpoint);
    if (state && now - state.at < FAIL_OPEN_LOG_INTERVAL_MS) {
      state.suppressed++;
      return;
    }
    options.logger.warn(
      {
        event: "rate_limit_fail_open",
        endpoint,
        reason: error instanceof TimeoutError ? "timeout" : "store_error",
        err: describeError(error),
        suppressed: state?.suppressed ?? 0,
      },
      "rate limiter unavailable; failing open",
    );
    lastLogged.set(endpoint, { at: now, suppressed: 0 });
  }

  return {
    async consume(endpoint, key) {
      const limit = limits[endpoint];
      try {
        const res = await withTimeout(limiters[endpoint].consume(key, 1), timeoutMs);
        return { kind: "allowed", limit, remaining: res.remainingPoints, resetSeconds: toSeconds(res) };
      } catch (outcome) {
        if (outcome instanceof RateLimiterRes) {
          return { kind: "limited", limit, remaining: 0, resetSeconds: toSeconds(outcome) };
        }
        logFailOpen(endpoint, outcome);
        return { kind: "unknown", limit };
      }
    },
  };
}

function toSeconds(res: RateLimiterRes): number {
  return Math.max(1, Math.ceil(res.msBeforeNext / 1000));
}

/**
 * RateLimit-* headers of the IETF draft (draft-ietf-httpapi-ratelimit-headers-07 field names):
 * Limit, Remaining, Reset (seconds until the window resets) and Policy (`<limit>;w=60`). When the
 * limiter failed open only Limit and Policy are sent: nothing is known about the window.
 */
export function setRateLimitHeaders(res: Response, decision: RateDecision): void {
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
