/**
 * Receivers of vote webhooks for the common servers: they read the raw body themselves, verify it
 * (`verifyWebhook`), answer at once (204; 401 or 400 with a JSON error body when verification
 * fails), and then hand each vote to `onVote` once: a delivery id already seen is answered 204 and
 * not passed on. Nothing here imports a Node module, so the package stays usable on edge runtimes.
 */
import type { VoteEvent } from "./contract.js";
import { WebhookVerificationError } from "./errors.js";
import { type VerifiedWebhook, verifyWebhook, type WebhookHeaders } from "./webhook.js";

/** Remembers delivery ids. `add` answers true the first time it is given an id (atomically, if shared). */
export interface SeenStore {
  add(deliveryId: string): boolean | Promise<boolean>;
}

/**
 * The default store: the last `capacity` ids in memory, least recently seen forgotten first. Use a
 * shared one (a unique key in your database, Redis `SET id 1 NX EX 86400`) when several copies of
 * the receiver run.
 */
export function memorySeenStore(capacity = 10_000): SeenStore {
  const ids = new Map<string, true>();
  return {
    add(deliveryId) {
      if (ids.has(deliveryId)) {
        ids.delete(deliveryId);
        ids.set(deliveryId, true);
        return false;
      }
      ids.set(deliveryId, true);
      if (ids.size > capacity) ids.delete(ids.keys().next().value as string);
      return true;
    },
  };
}

export interface WebhookReceiverOptions {
  /** The webhook secret, or the new and the old one during a rotation. */
  secret: string | readonly string[];
  /** Your work for one vote; runs after the answer has been sent, once per delivery id. */
  onVote: (vote: VoteEvent, delivery: { deliveryId: string }) => unknown;
  /** Delivery ids already handled (default: `memorySeenStore()`). */
  seen?: SeenStore;
  /** See `verifyWebhook` (default 300). */
  toleranceSeconds?: number;
  /** Failures of `onVote`, and (node handler) of a request that could not be handled (default: `console.error`). */
  onError?: (error: unknown, delivery: { deliveryId: string }) => void;
  /** Largest body read (default 64 KiB); a longer one is answered 413. */
  maxBodyBytes?: number;
}

interface Answer {
  status: number;
  error?: string;
  /** The vote to hand to onVote once the answer is out. */
  vote?: { event: VoteEvent; deliveryId: string };
}

const DEFAULT_MAX_BODY = 64 * 1024;

function receiver(options: WebhookReceiverOptions) {
  const seen = options.seen ?? memorySeenStore();
  const onError =
    options.onError ??
    ((error: unknown, d: { deliveryId: string }) => console.error("onVote failed", d.deliveryId, error));
  const answer = async (body: Uint8Array | string, headers: WebhookHeaders): Promise<Answer> => {
    let verified: VerifiedWebhook;
    try {
      verified = await verifyWebhook({
        body,
        headers,
        secret: options.secret,
        toleranceSeconds: options.toleranceSeconds,
      });
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      return { status: error.reason === "invalid_body" ? 400 : 401, error: error.message };
    }
    // Test events and kinds this receiver does not handle are acknowledged and ignored.
    if (verified.event.event !== "vote.create") return { status: 204 };
    // A legacy request without X-Webhook-Delivery is keyed on the vote itself, as the spec allows.
    const key = verified.deliveryId || `${verified.event.user_id}@${verified.event.voted_at}`;
    let first: boolean;
    try {
      first = await seen.add(key);
    } catch {
      // Without the store a repeat cannot be told from a first delivery: let the directory retry.
      return { status: 503, error: "The delivery could not be recorded; retry later." };
    }
    return first
      ? { status: 204, vote: { event: verified.event, deliveryId: verified.deliveryId } }
      : { status: 204 };
  };
  /** Runs onVote on a later turn, after the answer has been written. */
  const handOver = (vote: Answer["vote"]): Promise<void> | undefined => {
    if (!vote) return undefined;
    const delivery = { deliveryId: vote.deliveryId };
    return new Promise<void>((resolve) => setTimeout(resolve, 0))
      .then(() => options.onVote(vote.event, delivery))
      .then(
        () => undefined,
        (error: unknown) => {
          try {
            onError(error, delivery);
          } catch {
            // A failing hook must not become an unhandled rejection in the receiver's process.
          }
        },
      );
  };
  return { answer, handOver, onError, maxBody: options.maxBodyBytes ?? DEFAULT_MAX_BODY };
}

/** The parts of a `node:http` IncomingMessage (or an Express request) the adapters use. */
export interface NodeRequestLike {
  headers: Record<string, string | string[] | undefined>;
  // biome-ignore lint/suspicious/noExplicitAny: Node's own listener type, so that IncomingMessage fits.
  on(event: string, listener: (...args: any[]) => void): unknown;
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

function readBody(req: NodeRequestLike, limit: number): Promise<Uint8Array | "too_large"> {
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (chunk: Uint8Array | string) => {
      const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
      size += bytes.length;
      if (size > limit) tooLarge = true;
      if (!tooLarge) chunks.push(bytes);
    });
    req.on("end", () => {
      if (tooLarge) return resolve("too_large");
      const out = new Uint8Array(size);
      let at = 0;
      for (const c of chunks) {
        out.set(c, at);
        at += c.length;
      }
      resolve(out);
    });
    req.on("error", reject);
  });
}

function send(res: NodeResponseLike, result: Answer): void {
  res.statusCode = result.status;
  if (result.error === undefined) {
    res.end();
    return;
  }
  res.setHeader("content-type", "application/json; charset=utf-8");
  res.end(JSON.stringify({ error: result.error }));
}

async function handleNode(
  r: ReturnType<typeof receiver>,
  req: NodeRequestLike,
  res: NodeResponseLike,
): Promise<void> {
  let body: Uint8Array | string | "too_large";
  if (req.body instanceof Uint8Array || typeof req.body === "string") body = req.body;
  else if (req.body !== undefined && req.body !== null && req.readableEnded !== false) {
    // A JSON or urlencoded parser ran first: the raw bytes are gone and no signature can be checked.
    throw new Error(
      "The webhook body was already parsed; mount the webhook handler before express.json() (or give it express.raw()).",
    );
  } else body = await readBody(req, r.maxBody);
  if (body === "too_large") return send(res, { status: 413, error: "The request body is too large." });
  const result = await r.answer(body, req.headers);
  send(res, result);
  void r.handOver(result.vote);
}

/** A `node:http` request handler: `http.createServer(nodeWebhook({ secret, onVote }))`. */
export function nodeWebhook(
  options: WebhookReceiverOptions,
): (req: NodeRequestLike, res: NodeResponseLike) => void {
  const r = receiver(options);
  return (req, res) => {
    handleNode(r, req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, { status: 500, error: "The webhook could not be handled." });
      r.onError(error, { deliveryId: "" });
    });
  };
}

/**
 * Express middleware (Express 4 and 5, no import of Express):
 * `app.post("/webhooks/votes", expressWebhook({ secret, onVote }))`. Mount it before any JSON body
 * parser for that path, or after `express.raw({ type: "application/json" })`.
 */
export function expressWebhook(
  options: WebhookReceiverOptions,
): (req: NodeRequestLike, res: NodeResponseLike, next: (error?: unknown) => void) => void {
  const r = receiver(options);
  return (req, res, next) => {
    handleNode(r, req, res).catch(next);
  };
}

/**
 * A fetch-style handler, `(Request) => Promise<Response>`: Hono, Next.js route handlers, Bun,
 * Deno, Cloudflare Workers. Pass the platform's context as the second argument where the runtime
 * ends work after the response (Workers, Vercel): `onVote` is handed to its `waitUntil`.
 */
export function fetchWebhook(
  options: WebhookReceiverOptions,
): (request: Request, context?: { waitUntil?(work: Promise<unknown>): void }) => Promise<Response> {
  const r = receiver(options);
  return async (request, context) => {
    const declared = Number(request.headers.get("content-length"));
    let result: Answer;
    if (declared > r.maxBody) result = { status: 413, error: "The request body is too large." };
    else {
      const body = new Uint8Array(await request.arrayBuffer());
      result =
        body.length > r.maxBody
          ? { status: 413, error: "The request body is too large." }
          : await r.answer(body, request.headers);
    }
    const work = r.handOver(result.vote);
    if (work) context?.waitUntil?.(work);
    if (result.error === undefined) return new Response(null, { status: result.status });
    return new Response(JSON.stringify({ error: result.error }), {
      status: result.status,
      headers: { "content-type": "application/json; charset=utf-8" },
    });
  };
}
