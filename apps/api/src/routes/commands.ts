/**
 * PUT /api/v1/bots/{id}/commands: replaces the command list (not a merge). POST on the same path
 * is the spelling of discordbotlist.com's client (`postBotCommands` sends the platform's command
 * array bare): it takes a bare array or `{commands}` and is otherwise the PUT — same parsing,
 * limits, answers and rate-limit budget (one `commands` window for both methods).
 */
import { ApiError, CommandsBody, type CommandsResponse, dedupeCommands, parseOrThrow } from "@botdir/schema";
import type { Request, Response, Router } from "express";
import type { ApiContext } from "../context.js";
import { jsonBodyReader } from "../http/json-body.js";
import { allowOnly } from "../http/methods.js";
import { authenticatedWrite } from "../http/write.js";
import { writeCommands } from "../services/bots.js";
import { findUnstorableText, nestedDeeperThan } from "../services/json-text.js";

export const COMMANDS_PATH = "/api/v1/bots/:id/commands";
/** Deepest nesting of arrays/objects accepted in a commands body (the body object is level 1). */
export const MAX_BODY_DEPTH = 32;

/** The de-duplicated list (first occurrence of a name kept), or the 400 naming the first problem. */
export function parseCommands(body: unknown): unknown[] {
  // Platform commands nest a handful of levels (groups, subcommands, options, choices); anything
  // far deeper is refused before recursive code (and jsonb) would overflow on it.
  if (nestedDeeperThan(body, MAX_BODY_DEPTH)) {
    throw new ApiError("bad_request", "The body is nested too deeply.");
  }
  const commands = dedupeCommands(parseOrThrow(CommandsBody, body).commands);
  const unstorable = findUnstorableText(commands, ["commands"]);
  if (unstorable !== null) {
    throw new ApiError("bad_request", `${unstorable} must not contain NUL or unpaired surrogate characters.`);
  }
  return commands;
}

/** POST's body: a bare array is the list itself; anything else is parsed as the PUT body. */
export function parsePostedCommands(body: unknown): unknown[] {
  return parseCommands(Array.isArray(body) ? { commands: body } : body);
}

export function registerCommands(router: Router, ctx: ApiContext): void {
  const readBody = jsonBodyReader(ctx.bodyLimits.commands);
  const handler =
    (parse: (body: unknown) => unknown[]) => async (req: Request<{ id: string }>, res: Response) => {
      const { input, result } = await authenticatedWrite(ctx, req, res, {
        endpoint: "commands",
        pathId: req.params.id,
        readBody,
        parse,
        write: (tokenHash, botId, commands) =>
          writeCommands(ctx.db, { tokenHash, botId, commands, now: ctx.clock.now() }),
      });
      // The site's bot page shows the list: drop its cache only when the list really changed.
      if (result.changed) await ctx.caches.invalidatePage(result.botId);
      const body: CommandsResponse = { success: true, count: input.length };
      res.json(body);
    };
  router.put(COMMANDS_PATH, handler(parseCommands));
  router.post(COMMANDS_PATH, handler(parsePostedCommands));
  allowOnly(router, COMMANDS_PATH, ["PUT", "POST"]);
}
