import { backoffDelay, DEFAULT_RETRY, retryDelay, retryPolicy } from "./retry.js";

const policy = retryPolicy({ attempts: 5, baseDelayMs: 100, maxDelayMs: 1_000, maxRetryAfterMs: 30_000 });
const top = () => 0.999_999;

describe("retry policy", () => {
  it("when a 400, 401, 403, 404, 409 or 413 comes back, then it is never retried", () => {
    for (const status of [400, 401, 403, 404, 409, 413]) expect(retryDelay({ status }, 1, policy)).toBeNull();
  });

  it("when a 5xx or a network error comes back, then the wait is full jitter under a doubling cap", () => {
    expect([1, 2, 3, 4].map((n) => backoffDelay(n, policy, top))).toEqual([99, 199, 399, 799]);
    expect(backoffDelay(9, policy, top)).toBe(999); // capped by maxDelayMs
    expect(backoffDelay(3, policy, () => 0)).toBe(0); // full jitter reaches down to 0
    expect(retryDelay({ status: 503 }, 2, policy, top)).toBe(199);
    expect(retryDelay({ networkError: true }, 1, policy, () => 0.5)).toBe(50);
  });

  it("when the attempts are used up, then nothing more is retried", () => {
    expect(retryDelay({ status: 503 }, 5, policy)).toBeNull();
    expect(retryDelay({ networkError: true }, 5, policy)).toBeNull();
    expect(retryDelay({ status: 429, retryAfter: 1 }, 5, policy)).toBeNull();
  });

  it("when a 429 says retryAfter within the bound, then exactly that wait; beyond it, no retry", () => {
    expect(retryDelay({ status: 429, retryAfter: 7 }, 1, policy)).toBe(7_000);
    expect(retryDelay({ status: 429, retryAfter: 30 }, 1, policy)).toBe(30_000);
    expect(retryDelay({ status: 429, retryAfter: 31 }, 1, policy)).toBeNull();
    expect(retryDelay({ status: 429 }, 1, policy)).toBe(1_000); // no retryAfter: one second
  });

  it("when retry is false, then one attempt; defaults otherwise, and bad numbers are refused", () => {
    expect(retryPolicy(false).attempts).toBe(1);
    expect(retryDelay({ status: 503 }, 1, retryPolicy(false))).toBeNull();
    expect(retryPolicy(undefined)).toEqual(DEFAULT_RETRY);
    expect(retryPolicy({ attempts: 2 })).toEqual({ ...DEFAULT_RETRY, attempts: 2 });
    expect(() => retryPolicy({ attempts: 0 })).toThrow(RangeError);
    expect(() => retryPolicy({ baseDelayMs: Number.NaN })).toThrow(RangeError);
  });
});
