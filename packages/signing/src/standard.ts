/**
 * Standard Webhooks signatures (https://www.standardwebhooks.com): `webhook-id`,
 * `webhook-timestamp` (Unix seconds when the attempt was signed) and `webhook-signature`, one or
 * more space-separated `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">`.
 *
 * The key is derived from the secret as the specification says: the part after `whsec_` (or the
 * whole string without the prefix) is base64 and its decoded bytes are the HMAC key. Our secrets are
 * `whsec_` + 64 hex characters; hex digits are base64 characters, so every secret ever issued
 * decodes (to 48 bytes), and `new Webhook(secret)` of the npm package `standardwebhooks` derives the
 * same key. A string that is not valid base64 (never issued, but e.g. a hand-made test secret) falls
 * back to its UTF-8 bytes so signing never throws.
 */
import { createHmac, createSecretKey, type KeyObject, timingSafeEqual } from "node:crypto";

export const STANDARD_HEADERS = {
  id: "webhook-id",
  timestamp: "webhook-timestamp",
  signature: "webhook-signature",
} as const;

export const SECRET_PREFIX = "whsec_";
/** Receivers reject a timestamp further than this from their clock (the specification's default). */
export const DEFAULT_TOLERANCE_S = 5 * 60;

type Bytes = string | Uint8Array;

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The HMAC key of a `whsec_` secret: the base64-decoded part after the prefix. */
export function webhookKey(secret: string): Buffer {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  if (encoded.length > 0 && BASE64.test(encoded)) return Buffer.from(encoded, "base64");
  return Buffer.from(secret, "utf8");
}

/** Secrets whose key object is kept (see keyObjectOf). */
const KEY_OBJECTS_KEPT = 10_000;
const keyObjects = new Map<string, KeyObject>();

/**
 * webhookKey as a KeyObject, made once per secret: on Node 22+ an HMAC given a Buffer key builds a
 * key object per call, about 7 times slower than reusing one (docs/performance.md). Bounded: the
 * oldest entry goes first.
 */
function keyObjectOf(secret: string): KeyObject {
  let key = keyObjects.get(secret);
  if (!key) {
    key = createSecretKey(webhookKey(secret));
    if (keyObjects.size >= KEY_OBJECTS_KEPT) keyObjects.delete(keyObjects.keys().next().value as string);
    keyObjects.set(secret, key);
  }
  return key;
}

/** `v1,<base64>`: the signature of one message under one secret. */
export function standardSignature(secret: string, id: string, timestamp: number, rawBody: Bytes): string {
  const mac = createHmac("sha256", keyObjectOf(secret))
    .update(`${id}.${timestamp}.`, "utf8")
    .update(rawBody)
    .digest("base64");
  return `v1,${mac}`;
}

/**
 * The three Standard Webhooks headers of one attempt. `secrets` lists the secrets to sign with, the
 * current one first (during a rotation's overlap, also the previous one): the receiver accepts the
 * message when any `v1,` signature matches a secret it knows.
 */
export function standardHeaders(
  secrets: readonly string[],
  id: string,
  signedAt: Date,
  rawBody: Bytes,
): Record<(typeof STANDARD_HEADERS)[keyof typeof STANDARD_HEADERS], string> {
  const timestamp = Math.floor(signedAt.getTime() / 1000);
  return {
    [STANDARD_HEADERS.id]: id,
    [STANDARD_HEADERS.timestamp]: String(timestamp),
    [STANDARD_HEADERS.signature]: secrets.map((s) => standardSignature(s, id, timestamp, rawBody)).join(" "),
  };
}

/**
 * Receiver side without the npm package: true when the headers carry a valid `v1,` signature of
 * `rawBody` under `secret` and the timestamp is within `toleranceS` of `now`. Constant-time compare.
 */
export function verifyStandard(
  secret: string,
  rawBody: Bytes,
  headers: { id?: string | null; timestamp?: string | null; signature?: string | null },
  options: { now?: Date; toleranceS?: number } = {},
): boolean {
  const { id, timestamp, signature } = headers;
  if (!id || !timestamp || !signature || !/^\d{1,12}$/.test(timestamp)) return false;
  const seconds = Number(timestamp);
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000);
  if (Math.abs(now - seconds) > (options.toleranceS ?? DEFAULT_TOLERANCE_S)) return false;
  const expected = Buffer.from(standardSignature(secret, id, seconds, rawBody).slice(3), "base64");
  let match = false;
  for (const part of signature.split(" ")) {
    const [version, value] = part.split(",");
    if (version !== "v1" || !value) continue;
    const given = Buffer.from(value, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) match = true;
  }
  return match;
}
