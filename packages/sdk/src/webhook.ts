/**
 * Verification of the directory's webhook requests, on Web Crypto only (Node ≥ 18, Bun, Deno,
 * browsers' and edge runtimes' `crypto.subtle`).
 *
 * Standard Webhooks (https://www.standardwebhooks.com) first: `webhook-signature` holds one or more
 * space-separated `v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<raw body>">`; two
 * during a secret rotation, so a receiver that holds either secret accepts. The key is the secret's
 * part after `whsec_`, base64-decoded (the same derivation as the dispatcher's `webhookKey` in
 * `@botdir/signing`). A request without those headers falls back to the directory's own
 * `X-Webhook-Signature-256: sha256=<hex HMAC of the raw body>` (keyed with the secret's UTF-8 bytes)
 * plus `Authorization` (the secret itself).
 */
import type { VoteAvailableEvent, VoteEvent } from "./contract.js";
import { WebhookVerificationError } from "./errors.js";

/** The body of a test event (`POST …/webhook/test` on the edit page); never enters the vote log. */
export interface WebhookTestEvent {
  event: "webhook.test";
  bot_id: string;
  test: true;
  sent_at: string;
}

/** What a webhook carries. Switch on `event`: more kinds may be added. */
export type WebhookEvent = VoteEvent | VoteAvailableEvent | WebhookTestEvent;

/** A `Headers` object (fetch) or a plain record (node:http `req.headers`, any letter case). */
export type WebhookHeaders = Headers | Record<string, string | readonly string[] | undefined>;

export interface VerifyWebhookOptions {
  /**
   * The raw request body, exactly as received: bytes (`Uint8Array`, Node `Buffer`, `ArrayBuffer`)
   * or the string they decode to. Never `JSON.stringify` of a parsed body: other spacing, key order
   * or escaping gives other bytes and the signature no longer matches.
   */
  body: string | Uint8Array | ArrayBuffer;
  headers: WebhookHeaders;
  /** The webhook secret (`whsec_…`), or several (during a rotation: the new one and the old one). */
  secret: string | readonly string[];
  /**
   * Largest accepted distance between `webhook-timestamp` and this clock, in seconds (default 300).
   * A finite number ≥ 0, or `verifyWebhook` throws a `TypeError` (a `NaN` from an unset variable
   * would otherwise turn the replay window off).
   */
  toleranceSeconds?: number;
  /** The receiver's clock (default: now). */
  now?: Date;
}

export interface VerifiedWebhook {
  /** The delivery id (`webhook-id` = `X-Webhook-Delivery`), stable across retries: de-duplicate on it. */
  deliveryId: string;
  /** The parsed body. */
  event: WebhookEvent;
  /** Which headers proved it: `standard` (signed timestamp) or `legacy` (`X-Webhook-Signature-256`). */
  scheme: "standard" | "legacy";
  /**
   * The W3C trace id of the directory's trace this delivery belongs to (`X-Webhook-Trace`, 32
   * lowercase hex characters), to log beside your own work; `null` when the header is absent or
   * malformed. It is not signed: use it to correlate, never to decide.
   */
  traceId: string | null;
}

export const DEFAULT_TOLERANCE_SECONDS = 300;

const SECRET_PREFIX = "whsec_";
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const TRACE_ID = /^[0-9a-f]{32}$/;
const utf8 = new TextEncoder();

/** The tolerance to use: `toleranceSeconds` when it is a finite number ≥ 0, else a `TypeError`. */
export function checkedTolerance(toleranceSeconds: number | undefined): number {
  if (toleranceSeconds === undefined) return DEFAULT_TOLERANCE_SECONDS;
  if (typeof toleranceSeconds !== "number" || !Number.isFinite(toleranceSeconds) || toleranceSeconds < 0) {
    throw new TypeError(
      `toleranceSeconds must be a finite number of seconds ≥ 0, not ${String(toleranceSeconds)}`,
    );
  }
  return toleranceSeconds;
}

/**
 * Checks a webhook request and returns its event and delivery id; throws `WebhookVerificationError`
 * (with a `reason`) when it is not a genuine, fresh request of the directory.
 */
export async function verifyWebhook(options: VerifyWebhookOptions): Promise<VerifiedWebhook> {
  const secrets = (typeof options.secret === "string" ? [options.secret] : [...options.secret]).filter(
    Boolean,
  );
  if (secrets.length === 0) throw new TypeError("verifyWebhook needs the webhook secret");
  const tolerance = checkedTolerance(options.toleranceSeconds);
  const body = bytesOf(options.body);
  const id = header(options.headers, "webhook-id");
  const timestamp = header(options.headers, "webhook-timestamp");
  const signatures = header(options.headers, "webhook-signature");

  let deliveryId: string;
  let scheme: VerifiedWebhook["scheme"];
  if (id !== undefined || timestamp !== undefined || signatures !== undefined) {
    if (!id || !timestamp || !signatures) {
      throw new WebhookVerificationError(
        "missing_signature",
        "Missing webhook-id, webhook-timestamp or webhook-signature.",
      );
    }
    await verifyStandard(secrets, body, id, timestamp, signatures, tolerance, options.now);
    deliveryId = id;
    scheme = "standard";
  } else {
    await verifyLegacy(secrets, body, options.headers);
    deliveryId = header(options.headers, "x-webhook-delivery") ?? "";
    scheme = "legacy";
  }
  const event = parseEvent(body);
  // Read last, once the request proved genuine (the receivers' tests rely on that order).
  const trace = header(options.headers, "x-webhook-trace");
  return { deliveryId, event, scheme, traceId: trace !== undefined && TRACE_ID.test(trace) ? trace : null };
}

async function verifyStandard(
  secrets: string[],
  body: Uint8Array<ArrayBuffer>,
  id: string,
  timestamp: string,
  signatures: string,
  tolerance: number,
  clock: Date | undefined,
): Promise<void> {
  if (!/^\d{1,12}$/.test(timestamp)) {
    throw new WebhookVerificationError("malformed_timestamp", "webhook-timestamp must be Unix seconds.");
  }
  const now = Math.floor((clock ?? new Date()).getTime() / 1000);
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    throw new WebhookVerificationError(
      "timestamp_out_of_tolerance",
      `webhook-timestamp is more than ${tolerance} seconds from this clock.`,
    );
  }
  const candidates = signatures
    .split(" ")
    .map((part) => part.split(","))
    .filter(([version, value]) => version === "v1" && value)
    .map(([, value]) => decodeBase64(value ?? ""))
    .filter((mac): mac is Uint8Array<ArrayBuffer> => mac !== undefined && mac.length === 32);
  if (candidates.length > 0) {
    const message = concat(utf8.encode(`${id}.${timestamp}.`), body);
    for (const secret of secrets) {
      const key = await hmacKey(standardKey(secret));
      for (const mac of candidates) if (await (await subtle()).verify("HMAC", key, mac, message)) return;
    }
  }
  throw new WebhookVerificationError("invalid_signature", "No webhook-signature matches the secret.");
}

async function verifyLegacy(secrets: string[], body: Uint8Array<ArrayBuffer>, headers: WebhookHeaders) {
  const signature = header(headers, "x-webhook-signature-256")?.trim();
  if (!signature) {
    throw new WebhookVerificationError("missing_signature", "The request carries no webhook signature.");
  }
  const mac = /^sha256=[0-9a-f]{64}$/i.test(signature) ? decodeHex(signature.slice(7)) : undefined;
  const authorization = header(headers, "authorization") ?? "";
  for (const secret of secrets) {
    if (!mac || !(await (await subtle()).verify("HMAC", await hmacKey(utf8.encode(secret)), mac, body)))
      continue;
    // The signature proves the body; Authorization must carry the same secret.
    if (await sameSecret(authorization, secret)) return;
    throw new WebhookVerificationError(
      "invalid_authorization",
      "Authorization does not carry the webhook secret.",
    );
  }
  throw new WebhookVerificationError(
    "invalid_signature",
    "X-Webhook-Signature-256 does not match the secret.",
  );
}

function parseEvent(body: Uint8Array): WebhookEvent {
  let event: unknown;
  try {
    event = JSON.parse(new TextDecoder().decode(body));
  } catch {
    event = undefined;
  }
  if (
    typeof event !== "object" ||
    event === null ||
    typeof (event as { event?: unknown }).event !== "string"
  ) {
    throw new WebhookVerificationError("invalid_body", "The body is not a JSON webhook event.");
  }
  return event as WebhookEvent;
}

/** The Standard Webhooks key of a secret, derived exactly as `@botdir/signing`'s `webhookKey`. */
function standardKey(secret: string): Uint8Array<ArrayBuffer> {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  if (encoded.length > 0 && BASE64.test(encoded)) {
    const key = decodeBase64(encoded);
    if (key) return key;
  }
  return utf8.encode(secret);
}

let subtleCrypto: Promise<SubtleCrypto> | undefined;

/**
 * Web Crypto's `subtle`: a global everywhere except Node 18, where it is `node:crypto`'s
 * `webcrypto`. The specifier is a variable so that bundlers for edge runtimes (which have the
 * global) leave the import alone.
 */
function subtle(): Promise<SubtleCrypto> {
  const global = globalThis.crypto?.subtle;
  if (global) return Promise.resolve(global);
  const nodeCrypto = "node:crypto";
  subtleCrypto ??= (import(nodeCrypto) as Promise<{ webcrypto: Crypto }>).then((m) => m.webcrypto.subtle);
  return subtleCrypto;
}

/** Imported keys by key bytes, so a receiver imports each secret's key once (bounded). */
const keys = new Map<string, Promise<CryptoKey>>();
const KEYS_KEPT = 100;

async function hmacKey(raw: Uint8Array<ArrayBuffer>): Promise<CryptoKey> {
  const cacheKey = Array.from(raw, (b) => b.toString(16).padStart(2, "0")).join("");
  let key = keys.get(cacheKey);
  if (!key) {
    key = subtle().then((s) =>
      s.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]),
    );
    if (keys.size >= KEYS_KEPT) keys.delete(keys.keys().next().value as string);
    keys.set(cacheKey, key);
  }
  return key;
}

/** Constant-time equality of two strings of any length: their SHA-256 digests are compared. */
async function sameSecret(given: string, secret: string): Promise<boolean> {
  const s = await subtle();
  const [a, b] = await Promise.all([
    s.digest("SHA-256", utf8.encode(given)),
    s.digest("SHA-256", utf8.encode(secret)),
  ]);
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

/** Header value by case-insensitive name; repeated headers are joined with a space. */
function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function" && typeof (headers as Headers).has === "function") {
    return (headers as Headers).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | readonly string[] | undefined>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  if (value === undefined) return undefined;
  return typeof value === "string" ? value : value.join(" ");
}

/** A copy of the body in a fresh ArrayBuffer (Web Crypto takes only those). */
function bytesOf(body: string | Uint8Array | ArrayBuffer): Uint8Array<ArrayBuffer> {
  if (typeof body === "string") return utf8.encode(body);
  const view = body instanceof ArrayBuffer ? new Uint8Array(body) : body;
  const copy = new Uint8Array(view.byteLength);
  copy.set(view);
  return copy;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

function decodeBase64(text: string): Uint8Array<ArrayBuffer> | undefined {
  try {
    const binary = atob(text);
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  } catch {
    return undefined;
  }
}

function decodeHex(hex: string): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
}
