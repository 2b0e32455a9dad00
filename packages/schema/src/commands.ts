import { z } from "zod";
import { charLength } from "./text.js";

export const COMMAND_LIMITS = {
  maxCommands: 100,
  nameMin: 1,
  nameMax: 32,
  descriptionMin: 1,
  descriptionMax: 100,
} as const;

/** Application command types of the platform: 1 chat input, 2 user, 3 message, 4 entry point. */
const CONTEXT_MENU_TYPES = new Set([2, 3]);

const CommandName = z
  .string()
  .refine(
    (s) => charLength(s) >= COMMAND_LIMITS.nameMin && charLength(s) <= COMMAND_LIMITS.nameMax,
    "must be 1 to 32 characters long",
  )
  .meta({ minLength: COMMAND_LIMITS.nameMin, maxLength: COMMAND_LIMITS.nameMax });

/**
 * A command as the chat platform describes it. Only name and description are checked against the
 * spec's bounds; every other field of the platform's application command objects (type, options,
 * localizations, ids, permissions, contexts, ...) passes through untouched and is stored.
 * Context-menu commands (type 2 and 3) have an empty description on the platform, so an empty or
 * missing description is accepted for them only.
 */
export const Command = z
  .looseObject({
    name: CommandName,
    description: z
      .string()
      .meta({
        maxLength: COMMAND_LIMITS.descriptionMax,
        description: "1 to 100 characters; may be empty or absent for context-menu commands (type 2 and 3).",
      })
      .optional(),
    type: z.number().int("must be an integer").min(1, "must be a command type").optional(),
  })
  .superRefine((cmd, ctx) => {
    const contextMenu = cmd.type !== undefined && CONTEXT_MENU_TYPES.has(cmd.type);
    const description = cmd.description;
    if (contextMenu) {
      if (description !== undefined && charLength(description) > COMMAND_LIMITS.descriptionMax) {
        ctx.addIssue({
          code: "custom",
          path: ["description"],
          message: "must be at most 100 characters long",
        });
      }
      return;
    }
    if (description === undefined) {
      ctx.addIssue({ code: "custom", path: ["description"], message: "is required" });
      return;
    }
    const n = charLength(description);
    if (n < COMMAND_LIMITS.descriptionMin || n > COMMAND_LIMITS.descriptionMax) {
      ctx.addIssue({ code: "custom", path: ["description"], message: "must be 1 to 100 characters long" });
    }
  });
export type Command = z.infer<typeof Command>;

export const CommandsBody = z.looseObject({
  commands: z.array(Command).max(COMMAND_LIMITS.maxCommands, "must hold at most 100 commands"),
});
export type CommandsBody = z.infer<typeof CommandsBody>;

/**
 * The body of POST /commands (discordbotlist.com's client spelling): the platform's command array
 * bare, or the PUT body. The API parses it by wrapping a bare array as `{commands}` and reading
 * that as CommandsBody, so both spellings get the PUT's bounds and error sentences.
 */
export const CommandsPostBody = z.union([
  CommandsBody,
  z.array(Command).max(COMMAND_LIMITS.maxCommands, "must hold at most 100 commands"),
]);
export type CommandsPostBody = z.infer<typeof CommandsPostBody>;

export const CommandsResponse = z.object({ success: z.boolean(), count: z.number().int() });
export type CommandsResponse = z.infer<typeof CommandsResponse>;

/**
 * Drops commands whose name repeats an earlier one, keeping the first. Names are unique per
 * command type, as on the platform: a chat command "info" and a user context-menu command "info"
 * are two different commands and both are kept.
 */
export function dedupeCommands<T extends { name: string; type?: number | undefined }>(
  commands: readonly T[],
): T[] {
  const seen = new Set<string>();
  const out: T[] = [];
  for (const command of commands) {
    const key = `${command.type ?? 1}:${command.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(command);
  }
  return out;
}
