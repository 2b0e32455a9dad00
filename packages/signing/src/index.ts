/**
 * HMAC-SHA256 signing of webhook bodies, and constant-time verification for receivers.
 *
 * The signature header is `X-Webhook-Signature-256: sha256=<hex>`, the hex HMAC-SHA256 of the
 * exact bytes of the request body, keyed with the webhook secret (the GitHub-style scheme).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

export const SIGNATURE_HEADER = "x-webhook-signature-256";
export const SIGNATURE_PREFIX = "sha256=";

/** Strings are hashed as their UTF-8 bytes; byte arrays as they are (never copied). */
type Bytes = string | Uint8Array;

/** `sha256=` followed by the lowercase hex HMAC-SHA256 of `rawBody` keyed with `secret`. */
export function sign(secret: Bytes, rawBody: Bytes): string {
  const mac = createHmac("sha256", secret).update(rawBody).digest("hex");
  return `${SIGNATURE_PREFIX}${mac}`;
}

/**
 * True when `header` is a valid signature of `rawBody`. Pass the raw bytes received, never
 * re-serialised JSON. The comparison runs in constant time; a missing or malformed header is false.
 */
export function verify(secret: Bytes, rawBody: Bytes, header: string | null | undefined): boolean {
  if (typeof header !== "string") return false;
  const trimmed = header.trim();
  if (trimmed.slice(0, SIGNATURE_PREFIX.length).toLowerCase() !== SIGNATURE_PREFIX) return false;
  const hex = trimmed.slice(SIGNATURE_PREFIX.length);
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return false;
  const expected = createHmac("sha256", secret).update(rawBody).digest();
  return timingSafeEqual(expected, Buffer.from(hex, "hex"));
}

/**
 * Constant-time equality of two secrets of any length (e.g. the `Authorization` value a receiver
 * gets against its stored webhook secret). Both sides are hashed first so their lengths never leak.
 */
export function safeEqual(a: Bytes, b: Bytes): boolean {
  return timingSafeEqual(compareDigest(a), compareDigest(b));
}

/** safeEqual against one fixed secret, whose digest is computed once (a per-request key check). */
export function secretMatcher(secret: Bytes): (candidate: Bytes) => boolean {
  const expected = compareDigest(secret);
  return (candidate) => timingSafeEqual(compareDigest(candidate), expected);
}

function compareDigest(value: Bytes): Buffer {
  return createHmac("sha256", "botdir-compare").update(value).digest();
}

export {
  DEFAULT_TOLERANCE_S,
  SECRET_PREFIX,
  STANDARD_HEADERS,
  standardHeaders,
  standardSignature,
  verifyStandard,
  webhookKey,
} from "./standard.js";
