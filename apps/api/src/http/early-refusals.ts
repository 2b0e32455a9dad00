/**
 * The refusals that need no I/O, answered before Express sees the request: a token the fresh token
 * set does not hold (401), a missing or unreadable Authorization header (401), and a token whose
 * window an over-limit note covers (its 404 or 429). These are the answers a loop of random or
 * over-limit tokens gets, so they should cost less than a request that reaches a route: no Express
 * routing, no query parsing, no route layers. Everything else (and any request these rules cannot
 * decide) goes to Express unchanged, which would give the very same answer: the rules are the
 * handlers' first step (refuseWithoutIo), and a path here matches only what its Express route
 * matches.
 *
 * Only the canonical spelling of a route is recognised here: lower case, no `//`, no trailing `/`,
 * no percent-encoding in the id, the route's own method. Any other spelling goes to Express.
 * The request still gets its request id, its log line and its metrics (earlyRequestContext), under
 * the same route label Express would give it.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "@botdir/schema";
import { earlyRequestContext, type HttpMetrics, type Logger, sendApiError } from "@botdir/service-kit";
import type { ApiContext } from "../context.js";
import { CHECK_ALIAS_PATH, CHECK_PATH } from "../routes/check.js";
import { COMMANDS_PATH } from "../routes/commands.js";
import { STATS_ALIAS_PATH, STATS_PATH } from "../routes/stats.js";
import { VOTES_ALIAS_PATH, VOTES_PATH } from "../routes/votes.js";
import { requireTokenHash } from "../services/auth.js";
import type { LimitedEndpoint } from "../services/ratelimit.js";
import { closeIfBodyUnread, refuseWithoutIo } from "./access.js";

interface EarlyRoute {
  endpoint: LimitedEndpoint;
  method: string;
  /** The Express route pattern, for the log line and the metrics. */
  label: string;
  /** The route reads a body (a refusal leaves it unread). */
  body: boolean;
}

const BOTS = "/api/v1/bots/";

/** `/api/v1/bots/<last>` (alias routes) and `/api/v1/bots/<id>/<last>`. */
const ROUTES = new Map<string, { alias: EarlyRoute; withId: EarlyRoute }>([
  [
    "check",
    {
      alias: { endpoint: "check", method: "GET", label: CHECK_ALIAS_PATH, body: false },
      withId: { endpoint: "check", method: "GET", label: CHECK_PATH, body: false },
    },
  ],
  [
    "votes",
    {
      alias: { endpoint: "votes", method: "GET", label: VOTES_ALIAS_PATH, body: false },
      withId: { endpoint: "votes", method: "GET", label: VOTES_PATH, body: false },
    },
  ],
  [
    "stats",
    {
      alias: { endpoint: "stats", method: "POST", label: STATS_ALIAS_PATH, body: true },
      withId: { endpoint: "stats", method: "POST", label: STATS_PATH, body: true },
    },
  ],
]);
/** PUT, and POST (discordbotlist.com's spelling): one endpoint, one rate-limit window. */
const COMMANDS: Record<string, EarlyRoute> = {
  PUT: { endpoint: "commands", method: "PUT", label: COMMANDS_PATH, body: true },
  POST: { endpoint: "commands", method: "POST", label: COMMANDS_PATH, body: true },
};

/** The route and path id of a canonical URL, or null (then Express decides). */
export function earlyRouteOf(
  method: string | undefined,
  url: string | undefined,
): { route: EarlyRoute; pathId: string | undefined } | null {
  if (url === undefined || !url.startsWith(BOTS)) return null;
  const q = url.indexOf("?");
  const rest = url.slice(BOTS.length, q === -1 ? url.length : q);
  const slash = rest.indexOf("/");
  if (slash === -1) {
    const route = ROUTES.get(rest)?.alias;
    return route !== undefined && route.method === method ? { route, pathId: undefined } : null;
  }
  const id = rest.slice(0, slash);
  const last = rest.slice(slash + 1);
  if (id.length === 0 || id.includes("%")) return null;
  const route = last === "commands" ? COMMANDS[method ?? ""] : ROUTES.get(last)?.withId;
  return route !== undefined && route.method === method ? { route, pathId: id } : null;
}

/**
 * Returns a request listener step: true when it answered the request (a refusal), false when the
 * request must go to Express.
 */
export function createEarlyRefusals(
  ctx: Pick<ApiContext, "tokens" | "limitNotes">,
  deps: { logger: Logger; metrics?: HttpMetrics },
): (req: IncomingMessage, res: ServerResponse) => boolean {
  const context = earlyRequestContext(deps.logger, deps.metrics);
  return (req, res) => {
    // Without a fresh token set nothing can be decided without I/O (the notes are read only for
    // tokens the set holds).
    if (ctx.tokens === null || !ctx.tokens.isFresh()) return false;
    const found = earlyRouteOf(req.method, req.url);
    if (found === null) return false;
    let refusal: ApiError;
    try {
      refuseWithoutIo(ctx, res, found.route.endpoint, requireTokenHash(req), found.pathId);
      return false;
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      refusal = error;
    }
    context(req, res, found.route.label);
    if (found.route.body) closeIfBodyUnread(req, res);
    sendApiError(res, refusal);
    return true;
  };
}
