/**
 * "Over its limit until <reset>", per token and endpoint, in this process. Written only when Redis
 * said a confirmed token's current fixed window is over its limit; read only while the token set says
 * the token is still valid (token-set.ts), so a revoked token is refused with 401, not 429. Until the
 * window's end, a request of that token is refused without Redis and without PostgreSQL, with the
 * Reset/Retry-After of the window Redis reported. The window cannot end earlier (it is fixed: only
 * its expiry ends it), so the note never refuses a request Redis would have allowed; requests it
 * refuses are not counted in Redis, which changes nothing (the window is already over its limit).
 */
import { performance } from "node:perf_hooks";
import type { LimitedEndpoint } from "./ratelimit.js";

export interface LimitNote {
  botId: string;
  limit: number;
  /** Milliseconds until the window resets, as of now. */
  resetMs: number;
}

export interface LimitNotes {
  note(endpoint: LimitedEndpoint, tokenHash: string, value: LimitNote): void;
  /** The note of a window still running, with its remaining milliseconds, or null. */
  find(endpoint: LimitedEndpoint, tokenHash: string): LimitNote | null;
  readonly size: number;
}

/** Expired notes are swept when the map grows past this many. */
const SWEEP_ABOVE = 10_000;

export function createLimitNotes(
  options: {
    /** Monotonic milliseconds (default performance.now). */
    now?: () => number;
    /** Called for every request a note refuses (the API counts it in botdir_rate_limit_rejections_total). */
    onRefusal?: (endpoint: LimitedEndpoint) => void;
  } = {},
): LimitNotes {
  const now = options.now ?? (() => performance.now());
  const notes = new Map<string, { botId: string; limit: number; until: number }>();
  function sweep(at: number): void {
    for (const [key, value] of notes) if (value.until <= at) notes.delete(key);
  }
  return {
    note(endpoint, tokenHash, value) {
      const at = now();
      if (notes.size >= SWEEP_ABOVE) sweep(at);
      notes.set(`${endpoint}:${tokenHash}`, {
        botId: value.botId,
        limit: value.limit,
        until: at + value.resetMs,
      });
    },
    find(endpoint, tokenHash) {
      const key = `${endpoint}:${tokenHash}`;
      const value = notes.get(key);
      if (value === undefined) return null;
      const resetMs = value.until - now();
      if (resetMs <= 0) {
        notes.delete(key);
        return null;
      }
      options.onRefusal?.(endpoint);
      return { botId: value.botId, limit: value.limit, resetMs };
    },
    get size() {
      return notes.size;
    },
  };
}
