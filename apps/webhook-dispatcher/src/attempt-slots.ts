/**
 * The attempts a replica runs at once (DISPATCHER_CONCURRENCY), whatever the jobs carrying them: a
 * `vote.create` job runs one attempt, a `vote.batch` job several, and every attempt of every job of
 * the worker takes a slot here first, so a batch of 16 never means 16 × concurrency requests.
 */
export interface AttemptSlots {
  /** Resolves once a slot is held; slots are handed out in the order asked for. */
  acquire(): Promise<void>;
  release(): void;
}

export function createAttemptSlots(size: number): AttemptSlots {
  let free = Math.max(1, size);
  const waiting: (() => void)[] = [];
  return {
    acquire() {
      if (free > 0) {
        free--;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => waiting.push(resolve));
    },
    release() {
      const next = waiting.shift();
      if (next) next();
      else free++;
    },
  };
}
