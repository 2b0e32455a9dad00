import type { BatchLimits } from "@botdir/batcher";
import type { Db } from "@botdir/db";
import type { Clock, Logger, RedisClient } from "@botdir/service-kit";
import type { FloodBudgetOptions } from "./http/flood-budget.js";
import type { BodyLimits } from "./http/json-body.js";
import type { ApiMetrics } from "./metrics.js";
import type { RateLimits } from "./services/ratelimit.js";
import type { TokenSet } from "./services/token-set.js";

/** What createApp takes: passed in so tests build the app on their own database, Redis and clock. */
export interface ApiDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  logger: Logger;
  /** Prefix of every Redis key the API writes (rate limits, caches). Default "botdir:". */
  redisPrefix?: string;
  /** Requests per token per minute, per endpoint (default: the spec's 60/10/600/60). */
  limits?: Partial<RateLimits>;
  /** How long a request waits for the limiter's Redis before counting locally (default 50 ms). */
  limiterTimeoutMs?: number;
  /** This replica's share of each limit while Redis fails (1 / API_REPLICAS; default 1). */
  limiterLocalShare?: number;
  /** The flood budget's settings (flood-budget.ts; default FLOOD_DEFAULTS); false: no budget. */
  flood?: FloodBudgetOptions | false;
  /** Largest accepted JSON bodies (default commands 1mb, stats 16kb); larger is a JSON 413. */
  bodyLimits?: Partial<BodyLimits>;
  /** Prometheus series of this app instance (default: a fresh registry; main.ts serves it). */
  metrics?: ApiMetrics;
  /** Hot-path statement batching (createBatcher); default DEFAULT_BATCH_LIMITS. */
  batching?: Partial<BatchLimits>;
  /**
   * The valid token hashes, kept fresh by LISTEN/NOTIFY (createTokenSet; main.ts starts it). With
   * it an unknown token is refused without a lookup of its own (once the set's shared barrier
   * confirms the miss), and a token already over its limit with no I/O; without it (or while it is
   * not fresh) every token is looked up in PostgreSQL.
   */
  tokens?: TokenSet;
}

export const DEFAULT_REDIS_PREFIX = "botdir:";
