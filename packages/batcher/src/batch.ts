/**
 * Coalesces the hot-path statements of concurrent requests into one statement per batch (the
 * "group commit" idea, applied to one-row reads and writes: /check, /stats, the rate limiter, vote
 * casting, the dispatcher's claims and records).
 *
 * A request queues its key and gets a promise. The queue is flushed in `setImmediate`, i.e. after
 * the event loop has handled every socket that was readable in this turn, so the requests parsed
 * in one turn share one statement, and an idle server adds no wait at all. At most `maxInFlight`
 * batches execute at once; while they all are, new keys wait and leave together in the next batch.
 * Under load this is what makes batches grow: PostgreSQL and node-postgres pay their per-statement
 * cost (a protocol round trip, an executor start-up, a commit and its WAL flush for writes) once
 * per batch instead of once per request.
 *
 * `conflictKey` keeps two keys that must not share a statement (two writes of the same bot) in
 * different batches, in arrival order. When a batch of several fails, each of its keys is run once
 * more on its own, so one request's failure (a row a trigger or constraint refuses) never becomes
 * the failure of the requests that happened to share its statement; a key that fails alone too
 * rejects with its own error (`isolateFailures: false` rejects the whole batch at once). `run`
 * must therefore be safe to repeat for a key whose batch failed: a statement PostgreSQL refused is
 * rolled back as a whole, but one whose answer was lost (node-postgres' query timeout while
 * PostgreSQL stalled) may have committed, and its keys then run again on their own effects
 * (vote-ingest answers such a vote as recorded: services/votes.ts).
 *
 * `retryAlone` covers the case isolation cannot: a batch of one (or a key run alone) that failed
 * with an error the store asks to be retried — PostgreSQL's deadlock victim or serialization
 * failure, whose transaction was rolled back whole — runs once more before its caller sees it.
 */
export interface BatchLimits {
  /** Batches executing at once (at most the pool connections they may use). */
  maxInFlight: number;
  /** Largest batch. */
  maxBatch: number;
}

/** The limits of the API's and vote-ingest's batches (the dispatcher has its own variables). */
export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxInFlight: 4, maxBatch: 64 };

export interface BatchOptions<K, V> extends BatchLimits {
  /** Runs one batch; resolves with one value per key, in the keys' order. */
  run(keys: readonly K[]): Promise<readonly V[]>;
  /** Keys with equal conflict keys never share a batch. */
  conflictKey?: (key: K) => string;
  /**
   * Whether a failed batch of several runs each key once more alone (default true). Off where a
   * failure can only be the store's (a Redis call), so that a stalled store is not waited for twice.
   */
  isolateFailures?: boolean;
  /**
   * Whether a key that failed alone (a batch of one, or a key rerun alone after its batch failed)
   * runs once more: for failures that say nothing about the key (e.g. `isRetryableConflict` of
   * @botdir/db, a deadlock victim). Default: never.
   */
  retryAlone?: (error: unknown) => boolean;
  /** Called with the size of every batch sent (metrics). */
  onBatch?: (size: number) => void;
}

export type Batched<K, V> = (key: K) => Promise<V>;

interface Pending<K, V> {
  key: K;
  resolve(value: V): void;
  reject(error: unknown): void;
}

export function createBatcher<K, V>(options: BatchOptions<K, V>): Batched<K, V> {
  const { maxInFlight, maxBatch, conflictKey, onBatch, isolateFailures = true, retryAlone } = options;
  /** `options.run`, a synchronous throw turned into a rejection. */
  const runOnce = (keys: readonly K[]): Promise<readonly V[]> => {
    try {
      return Promise.resolve(options.run(keys));
    } catch (error) {
      return Promise.reject(error);
    }
  };
  /** Runs a batch; a key alone that fails as `retryAlone` allows runs once more. */
  const run = (keys: readonly K[]): Promise<readonly V[]> => {
    const once = runOnce(keys);
    return keys.length === 1 && retryAlone
      ? once.catch((error: unknown) => (retryAlone(error) ? runOnce(keys) : Promise.reject(error)))
      : once;
  };
  if (!(maxInFlight >= 1 && maxBatch >= 1)) throw new RangeError("maxInFlight and maxBatch must be ≥ 1");
  let queue: Pending<K, V>[] = [];
  let inFlight = 0;
  let scheduled = false;

  function schedule(): void {
    if (scheduled || queue.length === 0 || inFlight >= maxInFlight) return;
    scheduled = true;
    setImmediate(flush);
  }

  /** Takes the next batch off the queue: up to maxBatch, skipping keys that conflict with it. */
  function take(): Pending<K, V>[] {
    if (conflictKey === undefined || queue.length === 1) {
      return queue.splice(0, maxBatch);
    }
    const batch: Pending<K, V>[] = [];
    const rest: Pending<K, V>[] = [];
    const seen = new Set<string>();
    for (const item of queue) {
      const conflict = conflictKey(item.key);
      if (batch.length < maxBatch && !seen.has(conflict)) {
        seen.add(conflict);
        batch.push(item);
      } else {
        rest.push(item);
      }
    }
    queue = rest;
    return batch;
  }

  function flush(): void {
    scheduled = false;
    while (queue.length > 0 && inFlight < maxInFlight) execute(take());
  }

  function execute(batch: Pending<K, V>[]): void {
    inFlight++;
    onBatch?.(batch.length);
    run(batch.map((item) => item.key))
      .then((values) => {
        if (values.length !== batch.length) {
          throw new Error(
            `batch returned ${values.length} results for ${batch.length} key${batch.length === 1 ? "" : "s"}`,
          );
        }
        for (const [i, item] of batch.entries()) item.resolve(values[i] as V);
      })
      .catch((error: unknown) => {
        if (batch.length === 1 || !isolateFailures) {
          for (const item of batch) item.reject(error);
          return;
        }
        return Promise.all(
          batch.map((item) =>
            run([item.key]).then(
              (values) =>
                values.length === 1
                  ? item.resolve(values[0] as V)
                  : item.reject(new Error(`batch returned ${values.length} results for 1 key`)),
              (alone: unknown) => item.reject(alone),
            ),
          ),
        );
      })
      .finally(() => {
        inFlight--;
        // Keys queued while every slot was busy have waited already: send them now.
        if (queue.length > 0 && inFlight < maxInFlight) flush();
      });
  }

  return (key) =>
    new Promise<V>((resolve, reject) => {
      queue.push({ key, resolve, reject });
      schedule();
    });
}
