/**
 * Redis caches shared with the site: the bot page cache (invalidated here when a bot's data
 * changes) and the widget cache. Cache operations are best-effort and bounded in time: PostgreSQL
 * holds the truth, and a slow or absent Redis must not fail or stall an API request.
 */

import { createBatcher, DEFAULT_BATCH_LIMITS } from "@botdir/batcher";
import type { Clock, Logger, RedisClient } from "@botdir/service-kit";
import { describeError, groupBySlot, systemClock, withTimeout } from "@botdir/service-kit";
import type { WidgetCounts } from "./bots.js";
import { createLocalCache, createSingleFlight } from "./single-flight.js";

export const CACHE_TIMEOUT_MS = 200;
export const WIDGET_CACHE_SECONDS = 300;
/** How long a process keeps its own copy of a badge's counts, read only while Redis is unreachable. */
export const WIDGET_LOCAL_CACHE_SECONDS = 30;
export const WIDGET_LOCAL_CACHE_ENTRIES = 10_000;
/**
 * How long a process remembers that an id is not listed (unknown or unapproved), answering its
 * badge with no I/O. A bot approved meanwhile shows within this (its badge may stay cached by
 * browsers for the 5 minutes of Cache-Control anyway). In-process only, so made-up ids cannot
 * fill Redis, and bounded like the local copies (oldest forgotten first).
 */
export const WIDGET_MISS_CACHE_SECONDS = 60;

export interface Caches {
  /** The key the site's bot page is cached under. */
  pageKey(botId: string): string;
  /** Drops the bot's page cache so the site re-renders it with the new data. */
  invalidatePage(botId: string): Promise<void>;
  /**
   * The widget's counts through the caches: Redis; while Redis is unreachable, this process's own
   * short-lived copy; on a miss `load`, run once for all the concurrent misses of one bot in this
   * process (single-flight) and written back to both. A null answer (not listed) is kept in this
   * process only, for WIDGET_MISS_CACHE_SECONDS, and answered before Redis is asked; a failing
   * `load` rejects every caller that shared it.
   */
  widget(botId: string, load: () => Promise<WidgetCounts | null>): Promise<WidgetCounts | null>;
  /**
   * Whether this process holds the badge's id in memory (not listed, or its own copy of the
   * counts): a badge that does not may cost a Redis read and a query (the flood budget's `widget`).
   */
  widgetInMemory(botId: string): boolean;
}

type RedisRead = { state: "hit"; counts: WidgetCounts } | { state: "miss" } | { state: "down" };

export function createCaches(options: {
  redis: RedisClient;
  prefix: string;
  logger: Logger;
  clock?: Clock;
}): Caches {
  const { redis, prefix, logger } = options;
  const clock = options.clock ?? systemClock;
  const local = createLocalCache<WidgetCounts>({
    ttlMs: WIDGET_LOCAL_CACHE_SECONDS * 1000,
    maxEntries: WIDGET_LOCAL_CACHE_ENTRIES,
    now: () => clock.now().getTime(),
  });
  const unlisted = createLocalCache<true>({
    ttlMs: WIDGET_MISS_CACHE_SECONDS * 1000,
    maxEntries: WIDGET_LOCAL_CACHE_ENTRIES,
    now: () => clock.now().getTime(),
  });
  const fills = createSingleFlight<WidgetCounts | null>();
  const pageKey = (botId: string) => `${prefix}page:bot:${botId}`;
  // The invalidations of one event-loop turn share one DEL (createBatcher, @botdir/batcher).
  const deletePages = createBatcher<string, undefined>({
    ...DEFAULT_BATCH_LIMITS,
    isolateFailures: false,
    // One DEL per hash slot on a Redis Cluster (a multi-key command must stay in one slot).
    run: async (keys) => {
      await withTimeout(
        Promise.all(
          groupBySlot(redis, keys).map((group) => redis.del(...group.map((i) => keys[i] as string))),
        ),
        CACHE_TIMEOUT_MS,
      );
      return keys.map(() => undefined);
    },
  });
  const widgetKey = (botId: string) => `${prefix}widget:bot:${botId}`;
  async function readWidget(botId: string): Promise<RedisRead> {
    try {
      const raw = await withTimeout(redis.get(widgetKey(botId)), CACHE_TIMEOUT_MS);
      if (raw === null) return { state: "miss" };
      const parsed = JSON.parse(raw) as WidgetCounts;
      return typeof parsed.votes === "number" ? { state: "hit", counts: parsed } : { state: "miss" };
    } catch {
      return { state: "down" };
    }
  }
  async function writeWidget(botId: string, counts: WidgetCounts): Promise<void> {
    try {
      await withTimeout(
        redis.set(widgetKey(botId), JSON.stringify(counts), "EX", WIDGET_CACHE_SECONDS),
        CACHE_TIMEOUT_MS,
      );
    } catch {
      // best-effort: the next request recomputes
    }
  }
  return {
    pageKey,
    async invalidatePage(botId) {
      try {
        await deletePages(pageKey(botId));
      } catch (error) {
        logger.warn(
          { event: "page_cache_invalidation_failed", botId, err: describeError(error) },
          "page cache",
        );
      }
    },
    widgetInMemory: (botId) => unlisted.get(botId) !== undefined || local.get(botId) !== undefined,
    async widget(botId, load) {
      if (unlisted.get(botId)) return null;
      const read = await readWidget(botId);
      if (read.state === "hit") return read.counts;
      if (read.state === "down") {
        const kept = local.get(botId);
        if (kept) return kept;
      }
      return fills(botId, async () => {
        const counts = await load();
        if (counts === null) {
          unlisted.set(botId, true);
        } else {
          local.set(botId, counts);
          await writeWidget(botId, counts);
        }
        return counts;
      });
    },
  };
}
