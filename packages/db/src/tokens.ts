import { hash, randomBytes } from "node:crypto";

/** A new API token: 32 bytes (256 bits) from the CSPRNG, base64url. */
export function generateToken(): string {
  return randomBytes(32).toString("base64url");
}

/** A new webhook secret: 32 bytes (256 bits) from the CSPRNG, hex. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString("hex")}`;
}

/**
 * SHA-256 (hex) of a token. Tokens are 256-bit random values, so a fast hash is enough (there
 * is nothing to brute-force), and it lets the database look the hash up by index. `crypto.hash`
 * is the one-shot form (no Hash object per call: this runs on every API request).
 */
export function hashToken(token: string): string {
  return hash("sha256", token, "hex");
}
