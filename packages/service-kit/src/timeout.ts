/** The error `withTimeout` rejects with when the deadline passes first. */
export class TimeoutError extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/**
 * `promise`, or a rejection with TimeoutError after `ms`. The timer is cleared either way, so a
 * fast answer leaves nothing behind on the event loop. The underlying work is not cancelled.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(ms)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
