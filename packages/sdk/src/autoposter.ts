import type { BotDirClient, StatsInput } from "./client.js";
import { ApiError } from "./errors.js";

export interface AutoposterOptions {
  client: BotDirClient;
  /** The numbers to post, read before every post (may be async). */
  stats: () => Omit<StatsInput, "shards"> | Promise<Omit<StatsInput, "shards">>;
  /**
   * Time between posts (default 30 minutes): a finite number from `MIN_AUTOPOST_INTERVAL_MS` (1 s)
   * to 2^31−1 ms (about 24.8 days, the longest timer), or `startAutoposter` throws a `RangeError`.
   */
  intervalMs?: number;
  /** Called with every failure (the poster carries on, except after a 401). Never throws into the poster. */
  onError?: (error: unknown) => void;
  /** Called after every successful post. */
  onPost?: (posted: { serverCount: number }) => void;
}

export interface Autoposter {
  /** Stops for good: no further post is made (a post in flight finishes). */
  stop(): void;
  /** True once stopped, by `stop()` or by a 401 (the token is wrong or was replaced). */
  readonly stopped: boolean;
}

export const DEFAULT_AUTOPOST_INTERVAL_MS = 30 * 60 * 1000;
/**
 * The shortest interval: POST /stats allows 60 posts a minute per token, so a poster posting more
 * often than once a second would be refused (429) by design.
 */
export const MIN_AUTOPOST_INTERVAL_MS = 1_000;
/** A longer timer fires at once (Node clamps it to 1 ms): the poster would post without pause. */
const MAX_AUTOPOST_INTERVAL_MS = 2 ** 31 - 1;

/**
 * Posts the bot's stats now and then every `intervalMs`. Never throws into the caller: failures go
 * to `onError`. A 401 stops it for good (a new token needs a new client); a 429 that the client's
 * own retry did not wait out (a long `retryAfter`) moves the next post to after the window resets.
 */
export function startAutoposter(options: AutoposterOptions): Autoposter {
  const intervalMs = options.intervalMs ?? DEFAULT_AUTOPOST_INTERVAL_MS;
  if (
    typeof intervalMs !== "number" ||
    !Number.isFinite(intervalMs) ||
    intervalMs < MIN_AUTOPOST_INTERVAL_MS ||
    intervalMs > MAX_AUTOPOST_INTERVAL_MS
  ) {
    throw new RangeError(
      `intervalMs must be from ${MIN_AUTOPOST_INTERVAL_MS} to ${MAX_AUTOPOST_INTERVAL_MS} milliseconds, not ${String(intervalMs)}`,
    );
  }
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const report = (error: unknown) => {
    try {
      options.onError?.(error);
    } catch {
      // A failing hook must not end the poster.
    }
  };

  const post = async () => {
    timer = undefined;
    if (stopped) return;
    let nextMs = intervalMs;
    try {
      const stats = await options.stats();
      const answer = await options.client.postStats(stats);
      try {
        options.onPost?.({ serverCount: answer.server_count });
      } catch {
        // As for onError.
      }
    } catch (error) {
      report(error);
      if (error instanceof ApiError && error.status === 401) stopped = true;
      if (error instanceof ApiError && error.status === 429 && error.retryAfter !== undefined) {
        nextMs = Math.min(MAX_AUTOPOST_INTERVAL_MS, Math.max(intervalMs, error.retryAfter * 1000));
      }
    }
    if (!stopped) timer = setTimeout(() => void post(), nextMs);
  };

  void post();
  return {
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
    get stopped() {
      return stopped;
    },
  };
}
