import type { Batched } from "@botdir/batcher";
import type { Db } from "@botdir/db";
import type { Clock, Logger } from "@botdir/service-kit";
import type { FloodBudget } from "./http/flood-budget.js";
import type { BodyLimits } from "./http/json-body.js";
import type { StatsWrite, VoteCheckRow, VoteWindowKey, WriteResult } from "./services/bots.js";
import type { Caches } from "./services/cache.js";
import type { LimitNotes } from "./services/limit-notes.js";
import type { RateLimiter } from "./services/ratelimit.js";
import type { TokenSet } from "./services/token-set.js";

/** What route handlers get: the injected dependencies plus the services built from them. */
export interface ApiContext {
  db: Db;
  clock: Clock;
  logger: Logger;
  limiter: RateLimiter;
  /** The valid token hashes in this process (no-I/O 401), when the app was given one. */
  tokens: TokenSet | null;
  /** Windows Redis said are over their limit (no-I/O 429); used only with a fresh token set. */
  limitNotes: LimitNotes;
  /** The budget of requests that need I/O before a refusal (flood-budget.ts); null: no budget. */
  flood: FloodBudget | null;
  caches: Caches;
  bodyLimits: BodyLimits;
  /** findVoteWindows, one request at a time, coalesced into batches (createBatcher). */
  voteWindow: Batched<VoteWindowKey, VoteCheckRow | null>;
  /** findBotIdsByTokens, one request at a time, coalesced into batches: authentication alone. */
  authenticate: Batched<string, string | null>;
  /** writeStats, one request at a time, coalesced into batches (one commit per batch). */
  writeStats: Batched<StatsWrite, WriteResult | null>;
}
