/**
 * The retry schedule. PostgreSQL's attempt number drives it, never BullMQ's own counter: that one
 * restarts whenever the outbox relay hands a delivery off again.
 */
import { WEBHOOK_MAX_ATTEMPTS } from "@botdir/schema";

export type RetryDelays = readonly number[];

/**
 * Delay before the attempt that follows failed attempt `attemptNumber` (1-based), or null when that
 * was the last one allowed.
 */
export function retryDelayMs(delays: RetryDelays, attemptNumber: number): number | null {
  if (!Number.isInteger(attemptNumber) || attemptNumber < 1) {
    throw new RangeError(`Attempt numbers start at 1 (got ${attemptNumber}).`);
  }
  if (attemptNumber >= WEBHOOK_MAX_ATTEMPTS) return null;
  const delay = delays[attemptNumber - 1];
  if (delay === undefined) throw new RangeError(`No retry delay configured after attempt ${attemptNumber}.`);
  return delay;
}

/**
 * Thrown by the handler after a failed attempt that will be retried. It carries the time already
 * written to webhook_deliveries.next_attempt_at, so BullMQ's delay and PostgreSQL agree.
 */
export class AttemptFailed extends Error {
  override readonly name = "AttemptFailed";

  constructor(
    readonly attemptNumber: number,
    readonly nextAttemptAt: Date,
    readonly errorKind: string,
  ) {
    super(
      `Webhook attempt ${attemptNumber} failed (${errorKind}); next attempt at ${nextAttemptAt.toISOString()}.`,
    );
  }
}

/**
 * BullMQ custom backoff (`backoff: {type: "webhook"}`): after a failed attempt, wait until the
 * next_attempt_at the handler recorded (delays[attemptNumber - 1] after the attempt). Any other
 * error (PostgreSQL unreachable, a secret that cannot be decrypted) consumed no attempt; the job is
 * retried after the first delay.
 */
export function createBackoffStrategy(delays: RetryDelays, now: () => number = Date.now) {
  return (_attemptsMade: number, _type?: string, error?: Error): number => {
    if (error instanceof AttemptFailed || error?.name === "AttemptFailed") {
      const at = (error as AttemptFailed).nextAttemptAt;
      return Math.max(0, at.getTime() - now());
    }
    return delays[0] ?? 60_000;
  };
}
