/**
 * The refusals that need no per-request I/O, answered before Express sees the request: a token the
 * fresh token set does not hold (401, once the set's shared barrier confirms the miss; 503 when the
 * flood budget sheds it, flood-budget.ts), a missing
 * or unreadable Authorization header (401), and a token whose window an over-limit note covers
 * (its 404 or 429). These are the answers a loop of random or over-limit tokens gets, so they
 * should cost less than a request that reaches a route: no Express routing, no query parsing, no
 * route layers. Everything else (and any request these rules cannot decide) goes to Express
 * unchanged, which would give the very same answer: the rules are the handlers' first step
 * (refuseWithoutIo), and a path here matches only what its Express route matches.
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
import type { FloodBudget } from "./flood-budget.js";

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
 * The request listener in front of `onward` (Express): answers the refusals it can decide, and
 * hands every other request to `onward` unchanged. A token the set holds is decided at once; a
 * token it does not hold waits for the set's barrier (TokenSet.confirmAbsent) with its body unread,
 * then gets its 401, or goes to `onward` when the token turned out valid or the set could not tell.
 */
export function createEarlyRefusals(
  ctx: Pick<ApiContext, "tokens" | "limitNotes"> & { flood?: FloodBudget | null },
  deps: { logger: Logger; metrics?: HttpMetrics },
  onward: (req: IncomingMessage, res: ServerResponse) => void,
): (req: IncomingMessage, res: ServerResponse) => void {
  const context = earlyRequestContext(deps.logger, deps.metrics, { callerTrace: "link" });
  const refuse = (
    req: IncomingMessage,
    res: ServerResponse,
    route: EarlyRoute,
    refusal: ApiError,
    start?: bigint,
  ): void => {
    context(req, res, route.label, start);
    if (route.body) closeIfBodyUnread(req, res);
    sendApiError(res, refusal);
  };
  return (req, res) => {
    // Without a fresh token set nothing can be decided without I/O (the notes are read only for
    // tokens the set holds).
    if (ctx.tokens === null || !ctx.tokens.isFresh()) return onward(req, res);
    const found = earlyRouteOf(req.method, req.url);
    if (found === null) return onward(req, res);
    const { route } = found;
    let barrier: Promise<void> | undefined;
    try {
      barrier = refuseWithoutIo(ctx, res, route.endpoint, requireTokenHash(req), found.pathId, ctx.flood);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      return refuse(req, res, route, error);
    }
    if (barrier === undefined) return onward(req, res);
    const start = process.hrtime.bigint();
    barrier.then(
      () => onward(req, res),
      (error: unknown) => {
        // refuseWithoutIo rejects only with its refusals; anything else is Express's to decide.
        if (error instanceof ApiError) refuse(req, res, route, error, start);
        else onward(req, res);
      },
    );
  };
}
