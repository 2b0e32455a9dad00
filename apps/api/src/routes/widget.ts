/**
 * GET /widget/{id}.svg: public, unauthenticated, not rate limited. Cached 5 minutes on both sides:
 * `Cache-Control: public, max-age=300` and a Redis entry per bot (the counts, not the SVG). An
 * unknown, unapproved or malformed id gets the neutral badge with 200, never an error page; those
 * are not cached server-side (an id lookup by primary key is cheap, and caching arbitrary ids
 * would let anyone fill Redis).
 */
import { describeError, isBotId } from "@botdir/schema";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { allowOnly } from "../http/methods.js";
import { type WidgetCounts, widgetCounts } from "../services/bots.js";
import { WIDGET_CACHE_SECONDS } from "../services/cache.js";
import { renderBadge } from "../services/widget.js";

export const WIDGET_PATH = "/widget/:id.svg";

export function registerWidget(router: Router, ctx: ApiContext): void {
  router.get(WIDGET_PATH, async (req: Request<{ id: string }>, res: Response) => {
    const id = req.params.id;
    let counts: WidgetCounts | null = null;
    let cacheControl = `public, max-age=${WIDGET_CACHE_SECONDS}`;
    if (isBotId(id)) {
      try {
        counts = await ctx.caches.getWidget(id);
        if (counts === null) {
          counts = await widgetCounts(ctx.db, id, ctx.clock.now());
          if (counts !== null) await ctx.caches.setWidget(id, counts);
        }
      } catch (error) {
        // Still a badge (embedded in pages, an error would show a broken image), but not cached.
        ctx.logger.error({ event: "widget_failed", botId: id, err: describeError(error) }, "widget");
        cacheControl = "no-store";
      }
    }
    res.setHeader("Content-Type", "image/svg+xml; charset=utf-8");
    res.setHeader("Cache-Control", cacheControl);
    res.setHeader("X-Content-Type-Options", "nosniff");
    res.setHeader("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'");
    res.status(200).send(renderBadge(counts));
  });
  allowOnly(router, WIDGET_PATH, ["GET"]);
}
