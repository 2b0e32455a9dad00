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
 *
 * Slow webhooks get one slot. A webhook's cap is `perWebhook` only once it is known to answer
 * fast: its latest attempt got an HTTP answer (any status) within `slowMs`, and none of its
 * attempts now in flight has been running longer than `slowMs`. A webhook never seen by this
 * replica, one whose latest attempt took longer or ended without an answer (timeout, DNS,
 * connection, TLS), and one with an attempt hanging past `slowMs`, run one attempt at a time. So
 * endpoints that hold every request until the timeout, or whose names never resolve, hold one slot
 * each, even right after a restart (when nothing is known), while a healthy endpoint is back to its
 * full cap after its first quick answer.
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
  /**
   * DISPATCHER_SLOW_ATTEMPT_MS: an attempt running longer than this, or ending without an HTTP
   * answer, makes its webhook slow (one attempt at a time) until an attempt is quick again.
   */
  slowMs: number;
}

/** In flight for a webhook that is slow, or not known to be fast yet. */
export const SLOW_WEBHOOK_CAP = 1;

/** How an attempt went, for the webhook's cap: an HTTP answer within slowMs, or not. */
export type Pace = "fast" | "slow";

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

/** Sets `key` as the most recent entry of a map kept to MAX_KNOWN_ORIGINS entries (oldest out). */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key); // re-inserted last: the map's order is least recent first
  map.set(key, value);
  if (map.size > MAX_KNOWN_ORIGINS) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
}

export function createFairness<T>(limits: FairnessLimits, now: () => number = () => performance.now()) {
  const inFlight = new Map<string, Set<Ticket>>();
  const parked = new Map<string, T[]>();
  const knownOrigins = new Map<string, string>();
  /** originOf per webhook URL (bounded like knownOrigins): a URL is parsed once, not per attempt. */
  const originsOfUrls = new Map<string, string | null>();
  const originOfUrl = (url: string): string | null => {
    let origin = originsOfUrls.get(url);
    if (origin === undefined) {
      origin = originOf(url);
      if (originsOfUrls.size >= MAX_KNOWN_ORIGINS) {
        originsOfUrls.delete(originsOfUrls.keys().next().value as string);
      }
      originsOfUrls.set(url, origin);
    }
    return origin;
  };
  /** Bots whose webhook's latest attempt was quick (absent: slow, or never seen here). */
  const fastWebhooks = new Map<string, true>();

  const count = (key: string) => inFlight.get(key)?.size ?? 0;

  /** The bot's webhook cap right now: perWebhook once it is known to be fast, else SLOW_WEBHOOK_CAP. */
  function webhookCap(botId: string): number {
    if (!fastWebhooks.has(botId)) return SLOW_WEBHOOK_CAP;
    const hangingSince = now() - limits.slowMs;
    for (const t of inFlight.get(webhookKey(botId)) ?? []) {
      if (t.startedAt < hangingSince) return SLOW_WEBHOOK_CAP;
    }
    return limits.perWebhook;
  }

  const limitOf = (key: string) =>
    key.startsWith("webhook:") ? webhookCap(key.slice("webhook:".length)) : limits.perOrigin;

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
      if (count(wKey) >= webhookCap(botId)) return refuse(wKey);
      const origin = knownOrigins.get(botId) ?? null;
      if (origin !== null && count(originKey(origin)) >= limits.perOrigin) return refuse(originKey(origin));
      const ticket: Ticket = { botId, origin, startedAt: now() };
      take(wKey, ticket);
      if (origin !== null) take(originKey(origin), ticket);
      return { ok: true, ticket };
    },

    /** The claim read the bot's URL: count the ticket against that origin from now on. */
    learn(ticket: Ticket, url: string): void {
      const origin = originOfUrl(url);
      if (origin === null) return;
      remember(knownOrigins, ticket.botId, origin);
      if (ticket.origin === origin) return;
      if (ticket.origin !== null) free(originKey(ticket.origin), ticket);
      ticket.origin = origin;
      take(originKey(origin), ticket);
    },

    /**
     * Frees the ticket's slots; returns the keys that have room again (wake one job of each).
     * `pace`: how the attempt went (undefined when no attempt was made: the webhook's pace is
     * unchanged).
     */
    release(ticket: Ticket, pace?: Pace): string[] {
      if (pace === "fast") remember(fastWebhooks, ticket.botId, true);
      else if (pace === "slow") fastWebhooks.delete(ticket.botId);
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

    /** Free slots of `key` right now (more than one when a webhook just became fast again). */
    room(key: string): number {
      return Math.max(0, limitOf(key) - count(key));
    },

    park(key: string, item: T): void {
      let list = parked.get(key);
      if (!list) {
        list = [];
        parked.set(key, list);
      }
      list.push(item);
    },

    /** How many jobs are parked on `key`. */
    parkedOn(key: string): number {
      return parked.get(key)?.length ?? 0;
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

/** Errors where the receiver never answered: the attempt held its slot without an HTTP answer. */
const UNANSWERED: ReadonlySet<string> = new Set(["timeout", "connection", "tls", "dns"]);

/** How an attempt went, for its webhook's cap; undefined when no attempt was made (nothing learnt). */
/** The part of a DeliverResult (deliver.handler.ts) that tells how an attempt went. */
export interface AttemptEnd {
  kind: string;
  errorKind?: string | null;
}

/** `elapsedMs`: how long the HTTP attempt took (connect to status line), not the claim or record. */
export function paceOf(result: AttemptEnd, elapsedMs: number, slowMs: number): Pace | undefined {
  if (result.kind !== "delivered" && result.kind !== "retry" && result.kind !== "failed") return undefined;
  if (result.errorKind != null && UNANSWERED.has(result.errorKind)) return "slow";
  return elapsedMs < slowMs ? "fast" : "slow";
}
