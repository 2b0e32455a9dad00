import { BotId, parseOrThrow } from "@botdir/schema";
import type { Request } from "express";

/** The `:id` path parameter; an invalid id is a 400 naming it (internal callers want to know). */
export function botIdParam(req: Request): string {
  return parseOrThrow(BotId, req.params.id, "The bot id");
}
