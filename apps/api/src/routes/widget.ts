/**
 * GET /widget/{id}.svg: public, unauthenticated, not rate limited. Cached 5 minutes on both sides:
 * `Cache-Control: public, max-age=300` and a Redis entry per bot (the counts, not the SVG). An
 * unknown, unapproved or malformed id gets the neutral badge with 200, never an error page; a
 * malformed id costs no I/O, and an unknown or unapproved one is remembered by the process for
 * WIDGET_MISS_CACHE_SECONDS (not in Redis: made-up ids must not fill it), so asking for it again
 * costs neither Redis nor PostgreSQL, whose pool the authenticated endpoints share.
 *
 * A badge never lies: when the counts cannot be read (database error, or no answer within
 * WIDGET_QUERY_TIMEOUT_MS) the answer is the "unavailable" badge with 503 and a short cache, never
 * the "not listed" badge of a listed bot. Concurrent misses for one bot share one query
 * (single-flight, src/services/cache.ts), and while Redis is down the process's own short-lived
 * copy answers.
 *
 * An id this process does not hold in memory costs I/O and no token vouches for it: it is served
 * within the flood budget's `widget` class (http/flood-budget.ts), and past it answered 503 with
 * Retry-After and the JSON error body, not cached, before any I/O.
 */
import { isBotId } from "@botdir/schema";
import { describeError, sendApiError, withTimeout } from "@botdir/service-kit";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { overloaded } from "../http/flood-budget.js";
import { allowOnly } from "../http/methods.js";
import { type WidgetCounts, widgetCounts } from "../services/bots.js";
import { WIDGET_CACHE_SECONDS } from "../services/cache.js";
import { renderBadge, renderErrorBadge } from "../services/widget.js";

export const WIDGET_PATH = "/widget/:id.svg";
/** A miss costs well under 5 ms; past this the pool or the database is in trouble. */
export const WIDGET_QUERY_TIMEOUT_MS = 2_000;
/** The error badge is cached briefly, so a recovered database shows again within seconds. */
export const WIDGET_ERROR_CACHE_SECONDS = 10;

export function registerWidget(router: Router, ctx: ApiContext): void {
  router.get(WIDGET_PATH, async (req: Request<{ id: string }>, res: Response) => {
    const id = req.params.id;
    let counts: WidgetCounts | null = null;
    let failed = false;
    if (isBotId(id)) {
      const flood = ctx.caches.widgetInMemory(id) ? null : ctx.flood;
      if (flood !== null && !flood.enter("widget")) {
        res.setHeader("Cache-Control", "no-store");
        sendApiError(res, overloaded());
        return;
      }
      try {
        counts = await ctx.caches.widget(id, () =>
          withTimeout(widgetCounts(ctx.db, id, ctx.clock.now()), WIDGET_QUERY_TIMEOUT_MS),
        );
      } catch (error) {
        // Still a badge (embedded in pages, an error page would show a broken image).
        ctx.logger.error({ event: "widget_failed", botId: id, err: describeError(error) }, "widget");
        failed = true;
      } finally {
        flood?.leave("widget");
      }
    }
    res.setHeader("Content-Type", "image/svg+xml; charset=utf-8");
    res.setHeader(
      "Cache-Control",
      failed ? `public, max-age=${WIDGET_ERROR_CACHE_SECONDS}` : `public, max-age=${WIDGET_CACHE_SECONDS}`,
    );
    res.setHeader("X-Content-Type-Options", "nosniff");
    res.setHeader("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'");
    res.status(failed ? 503 : 200).send(failed ? renderErrorBadge() : renderBadge(counts));
  });
  allowOnly(router, WIDGET_PATH, ["GET"]);
}
