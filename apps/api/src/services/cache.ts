/**
 * Redis caches shared with the site: the bot page cache (invalidated here when a bot's data
 * changes) and the widget cache. Cache operations are best-effort and bounded in time: PostgreSQL
 * holds the truth, and a slow or absent Redis must not fail or stall an API request.
 */
import type { Logger } from "@botdir/schema";
import { createBatcher, DEFAULT_BATCH_LIMITS, describeError, withTimeout } from "@botdir/schema";
import type { Redis } from "ioredis";
import type { WidgetCounts } from "./bots.js";

export const CACHE_TIMEOUT_MS = 200;
export const WIDGET_CACHE_SECONDS = 300;

export interface Caches {
  /** The key the site's bot page is cached under. */
  pageKey(botId: string): string;
  /** Drops the bot's page cache so the site re-renders it with the new data. */
  invalidatePage(botId: string): Promise<void>;
  getWidget(botId: string): Promise<WidgetCounts | null>;
  setWidget(botId: string, counts: WidgetCounts): Promise<void>;
}

export function createCaches(options: { redis: Redis; prefix: string; logger: Logger }): Caches {
  const { redis, prefix, logger } = options;
  const pageKey = (botId: string) => `${prefix}page:bot:${botId}`;
  // The invalidations of one event-loop turn share one DEL (createBatcher, @botdir/schema).
  const deletePages = createBatcher<string, undefined>({
    ...DEFAULT_BATCH_LIMITS,
    isolateFailures: false,
    run: async (keys) => {
      await withTimeout(redis.del(...keys), CACHE_TIMEOUT_MS);
      return keys.map(() => undefined);
    },
  });
  const widgetKey = (botId: string) => `${prefix}widget:bot:${botId}`;
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
    async getWidget(botId) {
      try {
        const raw = await withTimeout(redis.get(widgetKey(botId)), CACHE_TIMEOUT_MS);
        if (raw === null) return null;
        const parsed = JSON.parse(raw) as WidgetCounts;
        return typeof parsed.votes === "number" ? parsed : null;
      } catch {
        return null;
      }
    },
    async setWidget(botId, counts) {
      try {
        await withTimeout(
          redis.set(widgetKey(botId), JSON.stringify(counts), "EX", WIDGET_CACHE_SECONDS),
          CACHE_TIMEOUT_MS,
        );
      } catch {
        // best-effort: the next request recomputes
      }
    },
  };
}
