/**
 * Single-flight: concurrent calls for one key share the work of the first one. A cache miss is the
 * moment many requests want the same thing (a badge expires on a busy page): without this, each
 * would run its own query, and a handful of slow ones take the whole pool. Only calls that overlap
 * share; the next call after the answer starts afresh (caching is the caller's business).
 */
export type SingleFlight<V> = (key: string, run: () => Promise<V>) => Promise<V>;

export function createSingleFlight<V>(): SingleFlight<V> & { readonly inFlight: number } {
  const flights = new Map<string, Promise<V>>();
  const share = (key: string, run: () => Promise<V>): Promise<V> => {
    const current = flights.get(key);
    if (current) return current;
    const flight = (async () => {
      try {
        return await run();
      } finally {
        flights.delete(key);
      }
    })();
    flights.set(key, flight);
    return flight;
  };
  return Object.defineProperty(share, "inFlight", { get: () => flights.size }) as SingleFlight<V> & {
    readonly inFlight: number;
  };
}

/**
 * A small in-process cache (insertion-ordered, oldest evicted past `maxEntries`) with a TTL: what
 * answers when the shared cache (Redis) cannot.
 */
export function createLocalCache<V>(options: { ttlMs: number; maxEntries: number; now: () => number }) {
  const entries = new Map<string, { value: V; expiresAt: number }>();
  return {
    get(key: string): V | undefined {
      const entry = entries.get(key);
      if (!entry) return undefined;
      if (entry.expiresAt <= options.now()) {
        entries.delete(key);
        return undefined;
      }
      return entry.value;
    },
    set(key: string, value: V): void {
      entries.delete(key);
      entries.set(key, { value, expiresAt: options.now() + options.ttlMs });
      if (entries.size > options.maxEntries) {
        const oldest = entries.keys().next();
        if (!oldest.done) entries.delete(oldest.value);
      }
    },
    get size() {
      return entries.size;
    },
  };
}
