import type { Db } from "@botdir/db";
import type { Batched, Clock, Logger } from "@botdir/schema";
import type { BodyLimits } from "./http/json-body.js";
import type { StatsWrite, VoteCheckRow, VoteWindowKey, WriteResult } from "./services/bots.js";
import type { Caches } from "./services/cache.js";
import type { RateLimiter } from "./services/ratelimit.js";

/** What route handlers get: the injected dependencies plus the services built from them. */
export interface ApiContext {
  db: Db;
  clock: Clock;
  logger: Logger;
  limiter: RateLimiter;
  caches: Caches;
  bodyLimits: BodyLimits;
  /** findVoteWindows, one request at a time, coalesced into batches (createBatcher). */
  voteWindow: Batched<VoteWindowKey, VoteCheckRow | null>;
  /** writeStats, one request at a time, coalesced into batches (one commit per batch). */
  writeStats: Batched<StatsWrite, WriteResult | null>;
}
