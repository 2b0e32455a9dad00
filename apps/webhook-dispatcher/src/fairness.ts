/**
 * Per-webhook fairness of one replica: at most `perWebhook` attempts in flight per bot webhook and
 * `perOrigin` per origin (scheme, host, port), so endpoints that hold every request until the
 * timeout get their share of the replica's slots, never all of them, and one hosting provider
 * serving many bots is limited as a whole but less tightly than one bot.
 *
 * This is the bookkeeping only (no BullMQ): `admit` takes a slot of the bot's webhook and of its
 * origin, or says which cap is full; `learn` tells the origin of a bot once its claim has read the
 * URL (the job names only the bot: the URL can change and is read at claim time, so an origin is
 * known from the bot's previous claim on, and a bot's first attempt counts against its origin only
 * from its claim on); `release` frees the slots and names the keys that have room again. Jobs
 * refused by a cap are parked on the cap's key, in arrival order, and handed back one per freed
 * slot (src/worker.ts moves them to BullMQ's delayed set and promotes them).
 */
import { performance } from "node:perf_hooks";

export type Cap = "webhook" | "origin";

export interface FairnessLimits {
  /** DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK */
  perWebhook: number;
  /** DISPATCHER_MAX_IN_FLIGHT_PER_ORIGIN */
  perOrigin: number;
  /**
   * Longest an admitted job can hold its slots (the claim's lease: the attempt's timeout plus a
   * margin). A parked job is due again by then at the latest, even if nobody wakes it.
   */
  holdMs: number;
}

export interface Ticket {
  readonly botId: string;
  origin: string | null;
  readonly startedAt: number;
}

export type Admission =
  | { ok: true; ticket: Ticket }
  /** Full: park the job on `key`; look again after `retryInMs` if nobody wakes it sooner. */
  | { ok: false; cap: Cap; key: string; retryInMs: number };

/** A parked job is looked at again no sooner than this, even if the oldest slot is about to end. */
export const MIN_RETRY_MS = 250;
/** Bots whose origin is remembered; the oldest is forgotten first. */
export const MAX_KNOWN_ORIGINS = 100_000;

/** `scheme://host[:port]` of a webhook URL (default ports left out, as URL.origin does), or null. */
export function originOf(url: string): string | null {
  try {
    const origin = new URL(url).origin;
    return origin === "null" ? null : origin;
  } catch {
    return null;
  }
}

export const webhookKey = (botId: string) => `webhook:${botId}`;
export const capOf = (key: string): Cap => (key.startsWith("webhook:") ? "webhook" : "origin");
export const originKey = (origin: string) => `origin:${origin}`;

export interface FairnessSnapshot {
  /** Jobs parked on a full webhook / origin in this replica. */
  parked: Record<Cap, number>;
  /** Webhooks / origins at their cap right now. */
  atCap: Record<Cap, number>;
}

export function createFairness<T>(limits: FairnessLimits, now: () => number = () => performance.now()) {
  const inFlight = new Map<string, Set<Ticket>>();
  const parked = new Map<string, T[]>();
  const knownOrigins = new Map<string, string>();

  const count = (key: string) => inFlight.get(key)?.size ?? 0;
  const limitOf = (key: string) => (key.startsWith("webhook:") ? limits.perWebhook : limits.perOrigin);

  function take(key: string, ticket: Ticket): void {
    let set = inFlight.get(key);
    if (!set) {
      set = new Set();
      inFlight.set(key, set);
    }
    set.add(ticket);
  }

  /** Frees `ticket`'s slot of `key`; true when that left room under the cap. */
  function free(key: string, ticket: Ticket): boolean {
    const set = inFlight.get(key);
    if (!set?.delete(ticket)) return false;
    if (set.size === 0) inFlight.delete(key);
    return set.size < limitOf(key);
  }

  /** Until the oldest attempt holding `key` must have ended (with a little jitter, ±10 %). */
  function retryIn(key: string): number {
    let oldest = Number.POSITIVE_INFINITY;
    for (const t of inFlight.get(key) ?? []) oldest = Math.min(oldest, t.startedAt);
    const left = Number.isFinite(oldest) ? oldest + limits.holdMs - now() : limits.holdMs;
    return Math.round(Math.max(MIN_RETRY_MS, left) * (0.9 + Math.random() * 0.2));
  }

  function refuse(key: string): Admission {
    return { ok: false, cap: capOf(key), key, retryInMs: retryIn(key) };
  }

  return {
    admit(botId: string): Admission {
      const wKey = webhookKey(botId);
      if (count(wKey) >= limits.perWebhook) return refuse(wKey);
      const origin = knownOrigins.get(botId) ?? null;
      if (origin !== null && count(originKey(origin)) >= limits.perOrigin) return refuse(originKey(origin));
      const ticket: Ticket = { botId, origin, startedAt: now() };
      take(wKey, ticket);
      if (origin !== null) take(originKey(origin), ticket);
      return { ok: true, ticket };
    },

    /** The claim read the bot's URL: count the ticket against that origin from now on. */
    learn(ticket: Ticket, url: string): void {
      const origin = originOf(url);
      if (origin === null) return;
      knownOrigins.delete(ticket.botId); // re-inserted last: the map's order is least recent first
      knownOrigins.set(ticket.botId, origin);
      if (knownOrigins.size > MAX_KNOWN_ORIGINS) {
        const oldest = knownOrigins.keys().next().value;
        if (oldest !== undefined) knownOrigins.delete(oldest);
      }
      if (ticket.origin === origin) return;
      if (ticket.origin !== null) free(originKey(ticket.origin), ticket);
      ticket.origin = origin;
      take(originKey(origin), ticket);
    },

    /** Frees the ticket's slots; returns the keys that have room again (wake one job of each). */
    release(ticket: Ticket): string[] {
      const roomy: string[] = [];
      const wKey = webhookKey(ticket.botId);
      if (free(wKey, ticket)) roomy.push(wKey);
      if (ticket.origin !== null && free(originKey(ticket.origin), ticket))
        roomy.push(originKey(ticket.origin));
      return roomy;
    },

    hasRoom(key: string): boolean {
      return count(key) < limitOf(key);
    },

    park(key: string, item: T): void {
      let list = parked.get(key);
      if (!list) {
        list = [];
        parked.set(key, list);
      }
      list.push(item);
    },

    /** The job parked longest on `key`, taken off the list. */
    unpark(key: string): T | undefined {
      const list = parked.get(key);
      const item = list?.shift();
      if (list && list.length === 0) parked.delete(key);
      return item;
    },

    snapshot(): FairnessSnapshot {
      const snap: FairnessSnapshot = { parked: { webhook: 0, origin: 0 }, atCap: { webhook: 0, origin: 0 } };
      for (const [key, list] of parked) snap.parked[capOf(key)] += list.length;
      for (const [key, set] of inFlight) if (set.size >= limitOf(key)) snap.atCap[capOf(key)]++;
      return snap;
    },
  };
}

export type Fairness<T> = ReturnType<typeof createFairness<T>>;
