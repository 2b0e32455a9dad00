/**
 * The spec's client guidance as a policy: 400, 401, 404 (any 4xx but 429) are never retried; a 429
 * waits `retryAfter` seconds when that is within a bound; 5xx answers and network failures are
 * retried with exponential backoff and full jitter, for a bounded number of attempts.
 */

export interface RetryOptions {
  /** Attempts in all, the first included (default 4). `1` never retries. */
  attempts?: number;
  /** Backoff cap before the first retry, doubled before each further one (default 500 ms). */
  baseDelayMs?: number;
  /** Largest backoff cap (default 30 s). */
  maxDelayMs?: number;
  /**
   * Longest `retryAfter` a 429 is waited out for (default 60 s). A longer one is not waited for:
   * the `ApiError` (with its `retryAfter`) goes to the caller at once.
   */
  maxRetryAfterMs?: number;
}

export type RetryPolicy = Required<RetryOptions>;

export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 4,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  maxRetryAfterMs: 60_000,
};

/** `false` turns retries off (one attempt); an object overrides some of the defaults. */
export function retryPolicy(options: RetryOptions | false | undefined): RetryPolicy {
  if (options === false) return { ...DEFAULT_RETRY, attempts: 1 };
  const policy = { ...DEFAULT_RETRY, ...options };
  for (const [name, value] of Object.entries(policy)) {
    if (!Number.isFinite(value) || value < 0)
      throw new RangeError(`retry.${name} must be a non-negative number`);
  }
  if (policy.attempts < 1) throw new RangeError("retry.attempts must be at least 1");
  return policy;
}

/** What one attempt ended with, as far as retrying is concerned. */
export type AttemptOutcome = { status: number; retryAfter?: number | undefined } | { networkError: true };

/**
 * Full jitter (a uniformly random wait between 0 and the exponential cap), so that many clients
 * failing at the same moment do not come back at the same moment. `retry` is 1 for the first retry.
 */
export function backoffDelay(retry: number, policy: RetryPolicy, random: () => number = Math.random): number {
  const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
  return Math.floor(random() * cap);
}

/**
 * Milliseconds to wait before the next attempt, or `null` when the outcome is final: a success, a
 * status that is never retried, the last attempt, or a 429 whose wait exceeds the bound.
 * `attemptsMade` counts the attempt that just ended.
 */
export function retryDelay(
  outcome: AttemptOutcome,
  attemptsMade: number,
  policy: RetryPolicy,
  random: () => number = Math.random,
): number | null {
  if (attemptsMade >= policy.attempts) return null;
  if ("networkError" in outcome) return backoffDelay(attemptsMade, policy, random);
  if (outcome.status === 429) {
    const waitMs = Math.max(1, outcome.retryAfter ?? 1) * 1000;
    return waitMs <= policy.maxRetryAfterMs ? waitMs : null;
  }
  if (outcome.status >= 500) return backoffDelay(attemptsMade, policy, random);
  return null;
}
