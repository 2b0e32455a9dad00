/**
 * Receivers of vote webhooks for the common servers. Each reads the raw body itself (capped at
 * `maxBodyBytes` while it reads: 413 above it, whether or not `Content-Length` was sent), verifies
 * it (`verifyWebhook`: 401, or 400 for a signed body that is not JSON), and then runs `onVote`
 * *before* it answers, bounded by `handlerTimeoutMs`:
 *
 * - `onVote` resolved: the delivery id is marked seen, then 204.
 * - `onVote` threw or outlasted the timeout: 500 with a JSON error, the id is not marked, `onError`
 *   is told. The directory's retry, or a redelivery (same id), reaches `onVote` again.
 * - A delivery id already marked: 204 without `onVote` (the directory delivers at least once).
 * - Two requests with one id at the same time: one `onVote`; the second awaits its outcome and
 *   answers the same.
 *
 * So a vote is never acknowledged before it was handled. Nothing here imports a Node module, so the
 * package stays usable on edge runtimes.
 */
import type { VoteAvailableEvent, VoteEvent } from "./contract.js";
import { WebhookVerificationError } from "./errors.js";
import { checkedTolerance, type VerifiedWebhook, verifyWebhook, type WebhookHeaders } from "./webhook.js";

/**
 * Remembers the delivery ids whose vote was handled. `has` is asked before `onVote` runs; `add` is
 * called only once `onVote` resolved. Share one (a unique key in your database, Redis
 * `EXISTS` / `SET id 1 EX 86400`) when several copies of the receiver run.
 */
export interface SeenStore {
  /** True when the id was marked: its vote was handled. */
  has(deliveryId: string): boolean | Promise<boolean>;
  /** Marks the id: its vote was handled. */
  add(deliveryId: string): unknown;
}

/**
 * The default store: the last `capacity` ids in memory, least recently seen forgotten first. Use a
 * shared one when several copies of the receiver run.
 */
export function memorySeenStore(capacity = 10_000): SeenStore {
  const ids = new Map<string, true>();
  return {
    has(deliveryId) {
      if (!ids.has(deliveryId)) return false;
      ids.delete(deliveryId);
      ids.set(deliveryId, true);
      return true;
    },
    add(deliveryId) {
      ids.delete(deliveryId);
      ids.set(deliveryId, true);
      if (ids.size > capacity) ids.delete(ids.keys().next().value as string);
    },
  };
}

/** What `onVote` and `onError` are told about the delivery besides the vote. */
export interface VoteDelivery {
  /** The delivery id (`webhook-id`), stable across retries and redeliveries; `""` on a legacy request without one. */
  deliveryId: string;
  /** The directory's W3C trace id of this delivery (`X-Webhook-Trace`), or `null`; see `VerifiedWebhook.traceId`. */
  traceId: string | null;
}

export interface WebhookReceiverOptions {
  /** The webhook secret, or the new and the old one during a rotation. */
  secret: string | readonly string[];
  /**
   * Your work for one vote. It runs before the answer: resolve once the vote is safely handled
   * (204); throw to have it delivered again (500). Runs once per delivery id that resolved.
   */
  onVote?: (vote: VoteEvent, delivery: VoteDelivery) => unknown;
  /**
   * Your work when a vote's window ended (`vote.available`, sent when the webhook chose that
   * event): the user can vote again. The same rules as `onVote` (before the answer; throw to have
   * it delivered again; once per delivery id). Without it, `vote.available` is answered 204 and
   * ignored; without `onVote`, so is `vote.create`. At least one of the two must be given.
   */
  onVoteAvailable?: (event: VoteAvailableEvent, delivery: VoteDelivery) => unknown;
  /** Delivery ids whose vote was handled (default: `memorySeenStore()`). */
  seen?: SeenStore;
  /** See `verifyWebhook` (default 300); a finite number ≥ 0, or the receiver throws a `TypeError`. */
  toleranceSeconds?: number;
  /**
   * Longest wait for `onVote`, in milliseconds (default 8000, well under the directory's 10 s reply
   * timeout). Past it the answer is 500 and the id is not marked; `onVote`'s promise is not
   * cancelled, so make the work safe to run again.
   */
  handlerTimeoutMs?: number;
  /**
   * Told of every `onVote` that threw or timed out, of a failing `seen` store and (node handler) of
   * a request that could not be handled (default: `console.error`). Never throws into the receiver.
   */
  onError?: (error: unknown, delivery: VoteDelivery) => void;
  /** Largest body read (default 64 KiB); a longer one is answered 413. */
  maxBodyBytes?: number;
}

export const DEFAULT_HANDLER_TIMEOUT_MS = 8_000;
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024;
/** setTimeout's largest delay; a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Answer {
  status: number;
  error?: string;
}

const TOO_LARGE: Answer = { status: 413, error: "The request body is too large." };
const NOT_HANDLED: Answer = {
  status: 500,
  error: "The vote could not be handled; it will be delivered again.",
};
const STORE_DOWN: Answer = { status: 503, error: "The delivery could not be checked; retry later." };

function positiveMs(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > MAX_TIMER_MS) {
    throw new TypeError(`${name} must be a number > 0 and ≤ ${MAX_TIMER_MS}, not ${String(value)}`);
  }
  return value;
}

function receiver(options: WebhookReceiverOptions) {
  const { onVote, onVoteAvailable } = options;
  if (onVoteAvailable !== undefined && typeof onVoteAvailable !== "function") {
    throw new TypeError("onVoteAvailable must be a function");
  }
  if (typeof onVote !== "function" && (onVote !== undefined || onVoteAvailable === undefined)) {
    throw new TypeError("onVote must be a function");
  }
  const secrets = typeof options.secret === "string" ? [options.secret] : [...(options.secret ?? [])];
  // An unset variable would otherwise surface only as a 500 on the first delivery.
  if (!secrets.some(Boolean)) throw new TypeError("the webhook secret is required");
  const toleranceSeconds = checkedTolerance(options.toleranceSeconds);
  const timeoutMs = positiveMs("handlerTimeoutMs", options.handlerTimeoutMs, DEFAULT_HANDLER_TIMEOUT_MS);
  const maxBody = positiveMs("maxBodyBytes", options.maxBodyBytes, DEFAULT_MAX_BODY_BYTES);
  const seen = options.seen ?? memorySeenStore();
  const hook =
    options.onError ??
    ((error: unknown, d: VoteDelivery) => console.error("vote webhook:", d.deliveryId, error));
  const onError = (error: unknown, delivery: VoteDelivery) => {
    try {
      hook(error, delivery);
    } catch {
      // A failing hook must not change the answer or become an unhandled rejection.
    }
  };
  /** The hook of the event's kind (the caller checked that it has one). */
  const handle = (event: VoteEvent | VoteAvailableEvent, delivery: VoteDelivery): unknown =>
    event.event === "vote.available" ? onVoteAvailable?.(event, delivery) : onVote?.(event, delivery);
  /** Votes whose onVote is running, by key: a concurrent request with the same key shares the outcome. */
  const inFlight = new Map<string, Promise<Answer>>();

  /** Checks, runs onVote within the timeout, marks: the answer for one delivery key. */
  const deliver = async (key: string, verified: VerifiedWebhook): Promise<Answer> => {
    const delivery: VoteDelivery = { deliveryId: verified.deliveryId, traceId: verified.traceId };
    try {
      if (await seen.has(key)) return { status: 204 };
    } catch (error) {
      // Without the store a repeat cannot be told from a first delivery: let the directory retry.
      onError(error, delivery);
      return STORE_DOWN;
    }
    try {
      await withTimeout(
        Promise.resolve().then(() => handle(verified.event as VoteEvent | VoteAvailableEvent, delivery)),
        timeoutMs,
      );
    } catch (error) {
      onError(error, delivery);
      return NOT_HANDLED;
    }
    try {
      await seen.add(key);
    } catch (error) {
      // The vote was handled: say so. Only a later redelivery of this id would run onVote again.
      onError(error, delivery);
    }
    return { status: 204 };
  };

  const answer = async (body: Uint8Array | string, headers: WebhookHeaders): Promise<Answer> => {
    let verified: VerifiedWebhook;
    try {
      verified = await verifyWebhook({ body, headers, secret: options.secret, toleranceSeconds });
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      return { status: error.reason === "invalid_body" ? 400 : 401, error: error.message };
    }
    // Test events and kinds this receiver has no handler for are acknowledged and ignored.
    const event = verified.event;
    if (event.event === "webhook.test") return { status: 204 };
    if (!(event.event === "vote.available" ? onVoteAvailable : event.event === "vote.create" && onVote)) {
      return { status: 204 };
    }
    // A legacy request without X-Webhook-Delivery is keyed on the vote itself, as the spec allows.
    const key = verified.deliveryId || `${event.event}:${event.user_id}@${event.voted_at}`;
    // No await between this lookup and the set below: a second request sees the first's entry.
    const running = inFlight.get(key);
    if (running) return running;
    const outcome = deliver(key, verified).finally(() => inFlight.delete(key));
    inFlight.set(key, outcome);
    return outcome;
  };
  return { answer, onError, maxBody };
}

/** `work`, or a rejection once `ms` have passed without it settling. */
function withTimeout<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`onVote did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** The parts of a `node:http` IncomingMessage (or an Express request) the adapters use. */
export interface NodeRequestLike {
  headers: Record<string, string | string[] | undefined>;
  // biome-ignore lint/suspicious/noExplicitAny: Node's own listener type, so that IncomingMessage fits.
  on(event: string, listener: (...args: any[]) => void): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as for `on`.
  removeListener?(event: string, listener: (...args: any[]) => void): unknown;
  /** Set by a body parser that ran before (Express `express.raw()` gives a Buffer). */
  body?: unknown;
  readableEnded?: boolean;
}

/** The parts of a `node:http` ServerResponse (or an Express response) the adapters use. */
export interface NodeResponseLike {
  statusCode: number;
  headersSent?: boolean;
  setHeader(name: string, value: string): unknown;
  end(chunk?: string): unknown;
}

/** A declared `Content-Length` above the limit: refused before a byte is read. */
function declaredTooLarge(value: string | null | undefined, limit: number): boolean {
  return value !== null && value !== undefined && Number(value) > limit;
}

/** The body, read until its end or until it passes `limit` (then reading stops at once). */
function readBody(req: NodeRequestLike, limit: number): Promise<Uint8Array | "too_large"> {
  const declared = req.headers["content-length"];
  if (declaredTooLarge(Array.isArray(declared) ? declared[0] : declared, limit)) {
    return Promise.resolve("too_large");
  }
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let size = 0;
    const stop = () => {
      req.removeListener?.("data", onData);
      req.removeListener?.("end", onEnd);
      req.removeListener?.("error", onFail);
    };
    const onData = (chunk: Uint8Array | string) => {
      const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
      size += bytes.length;
      if (size > limit) {
        stop();
        resolve("too_large");
        return;
      }
      chunks.push(bytes);
    };
    const onEnd = () => {
      stop();
      resolve(concat(chunks, size));
    };
    const onFail = (error: unknown) => {
      stop();
      reject(error);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onFail);
  });
}

function concat(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

function send(res: NodeResponseLike, result: Answer): void {
  res.statusCode = result.status;
  if (result.error === undefined) {
    res.end();
    return;
  }
  // The rest of a body too large is not read: the connection cannot carry another request.
  if (result.status === 413) res.setHeader("connection", "close");
  res.setHeader("content-type", "application/json; charset=utf-8");
  res.end(JSON.stringify({ error: result.error }));
}

async function handleNode(
  r: ReturnType<typeof receiver>,
  req: NodeRequestLike,
  res: NodeResponseLike,
): Promise<void> {
  let body: Uint8Array | string | "too_large";
  if (req.body instanceof Uint8Array || typeof req.body === "string") {
    // Read by a body parser (express.raw()) with its own limit: this one still applies.
    const size = typeof req.body === "string" ? new TextEncoder().encode(req.body).length : req.body.length;
    body = size > r.maxBody ? "too_large" : req.body;
  } else if (req.body !== undefined && req.body !== null && req.readableEnded !== false) {
    // A JSON or urlencoded parser ran first: the raw bytes are gone and no signature can be checked.
    throw new Error(
      "The webhook body was already parsed; mount the webhook handler before express.json() (or give it express.raw()).",
    );
  } else body = await readBody(req, r.maxBody);
  if (body === "too_large") return send(res, TOO_LARGE);
  send(res, await r.answer(body, req.headers));
}

/** A `node:http` request handler: `http.createServer(nodeWebhook({ secret, onVote }))`. */
export function nodeWebhook(
  options: WebhookReceiverOptions,
): (req: NodeRequestLike, res: NodeResponseLike) => void {
  const r = receiver(options);
  return (req, res) => {
    handleNode(r, req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, { status: 500, error: "The webhook could not be handled." });
      r.onError(error, { deliveryId: "", traceId: null });
    });
  };
}

/**
 * Express middleware (Express 4 and 5, no import of Express):
 * `app.post("/webhooks/votes", expressWebhook({ secret, onVote }))`. Mount it before any JSON body
 * parser for that path, or after `express.raw({ type: "application/json" })`. A request it cannot
 * handle at all (a body already parsed as JSON) goes to `next(error)`.
 */
export function expressWebhook(
  options: WebhookReceiverOptions,
): (req: NodeRequestLike, res: NodeResponseLike, next: (error?: unknown) => void) => void {
  const r = receiver(options);
  return (req, res, next) => {
    handleNode(r, req, res).catch(next);
  };
}

/** The body of a fetch Request, read from its stream until its end or until it passes `limit`. */
async function readRequest(request: Request, limit: number): Promise<Uint8Array | "too_large"> {
  const stream = request.body;
  if (declaredTooLarge(request.headers.get("content-length"), limit)) {
    await stream?.cancel().catch(() => {});
    return "too_large";
  }
  if (!stream) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return concat(chunks, size);
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return "too_large";
    }
    chunks.push(value);
  }
}

/**
 * A fetch-style handler, `(Request) => Promise<Response>`: Hono, Next.js route handlers, Bun,
 * Deno, Cloudflare Workers. `onVote` runs before the Response is returned, so no `waitUntil` is
 * needed.
 */
export function fetchWebhook(options: WebhookReceiverOptions): (request: Request) => Promise<Response> {
  const r = receiver(options);
  return async (request) => {
    const body = await readRequest(request, r.maxBody);
    const result = body === "too_large" ? TOO_LARGE : await r.answer(body, request.headers);
    if (result.error === undefined) return new Response(null, { status: result.status });
    return new Response(JSON.stringify({ error: result.error }), {
      status: result.status,
      headers: { "content-type": "application/json; charset=utf-8" },
    });
  };
}
