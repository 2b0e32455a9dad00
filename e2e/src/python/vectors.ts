/**
 * Signature test vectors for the Python SDK, made by @botdir/signing (the dispatcher's own signing
 * code), so that both languages agree byte for byte. Prints JSON on stdout;
 * packages/sdk-python/tests/vectors.json is its committed output, and the Python unit suite runs
 * this again and compares:
 *
 *   node --import tsx e2e/src/python/vectors.ts > packages/sdk-python/tests/vectors.json
 */
import { sign, standardHeaders } from "@botdir/signing";

const secrets = [
  // As issued: whsec_ + 64 hex characters (base64 characters, so the key is their decoding).
  "whsec_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
  // Standard Webhooks' own form: whsec_ + base64 of random bytes.
  "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  // Not base64 after the prefix: the key is the secret's UTF-8 bytes.
  "whsec_not*base64!",
];
const bodies = [
  '{"event":"vote.create","bot_id":"123456789012345678","user_id":"876543210987654321","voted_at":"2026-11-27T10:00:00.000Z"}',
  '{ "event" : "vote.create", "bot_id":"123456789012345678", "user_id":"876543210987654321", "voted_at":"2026-11-27T10:00:00.000Z", "note":"héllo ✓" }',
  '{"event":"webhook.test","bot_id":"123456789012345678","test":true,"sent_at":"2026-11-27T10:00:00.000Z"}',
];
const signedAt = new Date("2026-11-27T10:00:07.250Z");

const vectors = [];
for (const [i, body] of bodies.entries()) {
  for (const secret of secrets) {
    const id = `0192f0c8-4f3a-7d2e-9a1b-${String(100000000000 + i).padStart(12, "0")}`;
    vectors.push({
      secret,
      body,
      headers: standardHeaders([secret], id, signedAt, body),
      legacySignature: sign(secret, body),
    });
  }
}
// A rotation: both secrets sign, the new one first.
const rotation = {
  secrets: [secrets[0], secrets[1]],
  body: bodies[0],
  headers: standardHeaders(
    [secrets[0] ?? "", secrets[1] ?? ""],
    "0192f0c8-4f3a-7d2e-9a1b-200000000000",
    signedAt,
    bodies[0] ?? "",
  ),
};
process.stdout.write(`${JSON.stringify({ vectors, rotation }, null, 2)}\n`);
