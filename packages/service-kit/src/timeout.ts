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

/**
 * `promise`, or a rejection with TimeoutError once `ms` have passed in which the event loop could
 * have read the answer. A timer fires late when the loop is busy (a CPU-bound task, a long GC),
 * and an answer that arrived meanwhile waits in the socket behind it; a plain timer would call
 * the store slow for our own lag. So the decision is taken twice over:
 * - after the poll phase (setImmediate, as got does since its #534): an answer the loop had
 *   already received has been read and wins;
 * - a timer that fired more than a fifth of `ms` late gives the store the lag it measured again,
 *   until the answer comes, a timer fires on time, or `maxMs` (default 20 × `ms`) have passed.
 */
export function withLoopTimeout<T>(promise: Promise<T>, ms: number, maxMs = ms * 20): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const started = performance.now();
    promise.then(
      (value) => {
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
    const arm = (dueAt: number) => {
      timer = setTimeout(
        () => {
          const firedAt = performance.now();
          const late = firedAt - dueAt;
          setImmediate(() => {
            if (settled) return;
            const elapsed = firedAt - started;
            if (late > ms / 5 && elapsed < maxMs) arm(firedAt + Math.min(late, maxMs - elapsed));
            else reject(new TimeoutError(ms));
          });
        },
        Math.max(0, dueAt - performance.now()),
      );
    };
    arm(started + ms);
  });
}
