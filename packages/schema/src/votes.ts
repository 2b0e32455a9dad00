import { z } from "zod";
import { BotId, UserId } from "./ids.js";

export const VOTE_WINDOW_MS = 12 * 60 * 60 * 1000;
export const VOTES_LIMIT = { min: 1, max: 100, default: 50 } as const;

export const CheckQuery = z.looseObject({
  userId: z.preprocess((v) => (Array.isArray(v) ? v[0] : v), UserId),
});
export type CheckQuery = z.infer<typeof CheckQuery>;

/** Outside the window: voted 0, hasVoted false, votedAt and nextVoteAt null. */
export const VoteCheckResult = z.object({
  voted: z.union([z.literal(0), z.literal(1)]),
  hasVoted: z.boolean(),
  votedAt: z.iso.datetime().nullable(),
  nextVoteAt: z.iso.datetime().nullable(),
});
export type VoteCheckResult = z.infer<typeof VoteCheckResult>;

/** `limit` is clamped to 1..100; anything that is not a number falls back to the default (50). */
export function clampLimit(raw: unknown): number {
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (typeof value !== "string" && typeof value !== "number") return VOTES_LIMIT.default;
  const n = typeof value === "number" ? value : value.trim() === "" ? Number.NaN : Number(value);
  if (!Number.isFinite(n)) return VOTES_LIMIT.default;
  return Math.min(VOTES_LIMIT.max, Math.max(VOTES_LIMIT.min, Math.trunc(n)));
}

export const VotesQuery = z.looseObject({ limit: z.unknown().transform(clampLimit) });
export type VotesQuery = z.output<typeof VotesQuery>;

export const VoteEntry = z.object({ user_id: z.string(), voted_at: z.iso.datetime() });
export const VotesResponse = z.object({ votes: z.array(VoteEntry) });
export type VotesResponse = z.infer<typeof VotesResponse>;

/** POST /internal/v1/votes (site frontend → vote-ingest). */
export const CastVoteBody = z.looseObject({ bot_id: BotId, user_id: UserId });
export type CastVoteBody = z.infer<typeof CastVoteBody>;

export const CastVoteResponse = z.object({ vote: VoteEntry, nextVoteAt: z.iso.datetime() });
export type CastVoteResponse = z.infer<typeof CastVoteResponse>;

export const VoteConflict = z.object({ error: z.string(), nextVoteAt: z.iso.datetime() });
