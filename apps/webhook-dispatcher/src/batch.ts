/**
 * Group commit for the dispatcher's two statements: the claims (and the records) of the attempts
 * in flight share one statement per batch instead of one each.
 *
 * A caller queues its item and gets a promise. The queue is flushed in `setImmediate`, i.e. after
 * the event loop has handled everything that was readable in this turn (the jobs BullMQ fetched in
 * one Redis reply, the HTTP answers that came in together), so an idle dispatcher adds no wait. At
 * most `maxInFlight` batches execute at once; while they all do, new items wait and leave together
 * in the next batch. Under load this is what makes batches grow: node-postgres, the socket write
 * (which on a busy host hands the CPU to the PostgreSQL backend it wakes) and PostgreSQL's
 * per-statement work (executor start-up, commit, WAL flush) are paid once per batch.
 *
 * Items with equal `conflictKey`s (the same delivery) never share a batch; they go in arrival
 * order. A batch that fails rejects each of its items with the same error.
 */
export interface BatchOptions<K, V> {
  /** Runs one batch; resolves with one value per item, in the items' order. */
  run(items: readonly K[]): Promise<readonly V[]>;
  /** Batches executing at once. */
  maxInFlight: number;
  /** Largest batch. */
  maxBatch: number;
  conflictKey?: (item: K) => string;
}

export type Batched<K, V> = (item: K) => Promise<V>;

interface Pending<K, V> {
  item: K;
  resolve(value: V): void;
  reject(error: unknown): void;
}

export function createBatcher<K, V>(options: BatchOptions<K, V>): Batched<K, V> {
  const { run, maxInFlight, maxBatch, conflictKey } = options;
  if (!(maxInFlight >= 1 && maxBatch >= 1)) throw new RangeError("maxInFlight and maxBatch must be ≥ 1");
  let queue: Pending<K, V>[] = [];
  let inFlight = 0;
  let scheduled = false;

  function schedule(): void {
    if (scheduled || queue.length === 0 || inFlight >= maxInFlight) return;
    scheduled = true;
    setImmediate(flush);
  }

  /** The next batch: up to maxBatch items in arrival order, skipping conflicts with it. */
  function take(): Pending<K, V>[] {
    if (conflictKey === undefined || queue.length === 1) return queue.splice(0, maxBatch);
    const batch: Pending<K, V>[] = [];
    const rest: Pending<K, V>[] = [];
    const seen = new Set<string>();
    for (const pending of queue) {
      const key = conflictKey(pending.item);
      if (batch.length < maxBatch && !seen.has(key)) {
        seen.add(key);
        batch.push(pending);
      } else {
        rest.push(pending);
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
    let outcome: Promise<readonly V[]>;
    try {
      outcome = run(batch.map((pending) => pending.item));
    } catch (error) {
      outcome = Promise.reject(error);
    }
    outcome
      .then((values) => {
        if (values.length !== batch.length) {
          throw new Error(`batch returned ${values.length} results for ${batch.length} items`);
        }
        for (const [i, pending] of batch.entries()) pending.resolve(values[i] as V);
      })
      .catch((error: unknown) => {
        for (const pending of batch) pending.reject(error);
      })
      .finally(() => {
        inFlight--;
        // Items queued while every slot was busy have waited already: send them now.
        if (queue.length > 0 && inFlight < maxInFlight) flush();
      });
  }

  return (item) =>
    new Promise<V>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      schedule();
    });
}
