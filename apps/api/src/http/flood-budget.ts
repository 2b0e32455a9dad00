/**
 * The flood budget: requests that need I/O before they can be refused or answered, and that no
 * valid token vouches for, get a budget of their own, so a flood of them cannot starve the
 * authenticated requests (which are never shed here):
 *
 * - `unknown_token`: a token the fresh token set does not hold, waiting for the set's barrier
 *   before its 401 (early-refusals.ts);
 * - `widget`: a badge whose id this process does not hold in memory, which costs a Redis read and
 *   perhaps a PostgreSQL query (routes/widget.ts).
 *
 * Each class has a cap on its requests in flight; past it, and while the event loop's lag is past
 * `lagThresholdMs` (and for `holdMs` after), a request of the class is answered at once with 503
 * and Retry-After, before any I/O. The lag is measured by a cheap ticker every `tickMs`: the lag
 * is past the threshold when the last tick fired that late and the one before it did too, or the
 * next one is already that overdue; one late tick alone (a GC pause, a descheduled process) sheds
 * nothing.
 */
import { performance } from "node:perf_hooks";
import { ApiError } from "@botdir/schema";

export const FLOOD_CLASSES = ["unknown_token", "widget"] as const;
export type FloodClass = (typeof FLOOD_CLASSES)[number];

export const FLOOD_DEFAULTS = {
  lagThresholdMs: 100,
  maxPending: { unknown_token: 32, widget: 5 } as Record<FloodClass, number>,
  tickMs: 20,
  holdMs: 500,
} as const;

/** The 503's sentence: the error body of the spec, one sentence. */
export const OVERLOADED_MESSAGE = "The service is overloaded; retry shortly.";

export interface FloodBudget {
  /**
   * Admits one request of `kind` (then `leave` when its I/O is done), or returns false: answer it
   * now with `overloaded()` (counted by onShed).
   */
  enter(kind: FloodClass): boolean;
  leave(kind: FloodClass): void;
  /** The event loop's current lag in milliseconds, as the ticker sees it. */
  lagMs(): number;
  stop(): void;
}

export interface FloodBudgetOptions {
  lagThresholdMs?: number;
  maxPending?: Partial<Record<FloodClass, number>>;
  tickMs?: number;
  holdMs?: number;
  onShed?: (kind: FloodClass) => void;
}

export function createFloodBudget(options: FloodBudgetOptions = {}): FloodBudget {
  const threshold = options.lagThresholdMs ?? FLOOD_DEFAULTS.lagThresholdMs;
  const maxPending = { ...FLOOD_DEFAULTS.maxPending, ...options.maxPending };
  const tickMs = options.tickMs ?? FLOOD_DEFAULTS.tickMs;
  const holdMs = options.holdMs ?? FLOOD_DEFAULTS.holdMs;
  const pending: Record<FloodClass, number> = { unknown_token: 0, widget: 0 };
  let due = performance.now() + tickMs;
  let lastLate = 0;
  let previousLate = 0;
  let shedUntil = Number.NEGATIVE_INFINITY;
  const ticker = setInterval(() => {
    const now = performance.now();
    previousLate = lastLate;
    lastLate = Math.max(0, now - due);
    due = now + tickMs;
  }, tickMs);
  ticker.unref();

  const overdue = () => performance.now() - due;
  const lagMs = () => Math.max(lastLate, overdue());
  const lagging = () => lastLate > threshold && (previousLate > threshold || overdue() > threshold);

  return {
    enter(kind) {
      const now = performance.now();
      if (lagging()) shedUntil = now + holdMs;
      if (now < shedUntil || pending[kind] >= maxPending[kind]) {
        options.onShed?.(kind);
        return false;
      }
      pending[kind]++;
      return true;
    },
    leave(kind) {
      pending[kind] = Math.max(0, pending[kind] - 1);
    },
    lagMs,
    stop: () => clearInterval(ticker),
  };
}

/** The answer of a shed request: 503, Retry-After (sendApiError adds it to every 5xx). */
export function overloaded(): ApiError {
  return new ApiError("unavailable", OVERLOADED_MESSAGE);
}
