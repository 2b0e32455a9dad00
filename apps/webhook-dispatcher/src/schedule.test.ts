import { WEBHOOK_RETRY_DELAYS_MS } from "@botdir/schema";
import { AttemptFailed, createBackoffStrategy, retryDelayMs } from "./schedule.js";

describe("retryDelayMs", () => {
  it("gives the spec's delays after attempts 1..4: 1 min, 5 min, 30 min, 2 h", () => {
    expect([1, 2, 3, 4].map((n) => retryDelayMs(WEBHOOK_RETRY_DELAYS_MS, n))).toEqual([
      60_000, 300_000, 1_800_000, 7_200_000,
    ]);
  });

  it("gives no retry after the fifth attempt", () => {
    expect(retryDelayMs(WEBHOOK_RETRY_DELAYS_MS, 5)).toBeNull();
    expect(retryDelayMs(WEBHOOK_RETRY_DELAYS_MS, 6)).toBeNull();
  });

  it("refuses attempt numbers below 1", () => {
    expect(() => retryDelayMs(WEBHOOK_RETRY_DELAYS_MS, 0)).toThrow(RangeError);
  });
});

describe("the webhook backoff strategy", () => {
  const now = 1_000_000;
  const backoff = createBackoffStrategy([50, 60, 70, 80], () => now);

  it("after a failed attempt, waits until the next_attempt_at recorded in PostgreSQL, whatever BullMQ's own count", () => {
    const error = new AttemptFailed(3, new Date(now + 1_800_000), "timeout");
    expect(backoff(1, "webhook", error)).toBe(1_800_000);
    expect(backoff(4, "webhook", error)).toBe(1_800_000);
  });

  it("never returns a negative delay", () => {
    expect(backoff(1, "webhook", new AttemptFailed(1, new Date(now - 5), "connection"))).toBe(0);
  });

  it("retries an infrastructure error (no attempt used) after the first delay", () => {
    expect(backoff(1, "webhook", new Error("connect ECONNREFUSED 127.0.0.1:5432"))).toBe(50);
  });
});
