import { z } from "zod";

/** The bot's application id on the chat platform. */
export const BotId = z.string().regex(/^\d{17,19}$/, "must be a bot application id (17 to 19 digits)");
export type BotId = z.infer<typeof BotId>;

/** A chat-platform user id. */
export const USER_ID_PATTERN = /^\d{17,20}$/;
export const UserId = z.string().regex(USER_ID_PATTERN, "must be a user id (17 to 20 digits)");
export type UserId = z.infer<typeof UserId>;

export const isBotId = (value: unknown): value is string =>
  typeof value === "string" && /^\d{17,19}$/.test(value);
