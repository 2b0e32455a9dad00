/**
 * Webhook secrets must be sent verbatim, so they cannot be hashed: they are encrypted at rest with
 * AES-256-GCM under a **key ring** from the environment (SECRET_ENCRYPTION_KEYS, comma-separated
 * 32-byte keys, hex or base64; SECRET_ENCRYPTION_KEY is a ring of one). The first key encrypts,
 * every key decrypts.
 *
 * Stored forms:
 * - `v2:<key id>:<iv b64url>:<tag b64url>:<ciphertext b64url>`: the key id (8 hex characters, the
 *   first 4 bytes of SHA-256 of the key) names the key and is authenticated as GCM associated data.
 * - `v1:<iv>:<tag>:<ciphertext>` (before the key ring): names no key, so every key is tried.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createSecretKey,
  type KeyObject,
  randomBytes,
} from "node:crypto";

/** No key of the ring decrypts a stored secret (wrong ring, removed key, corrupt value). */
export class SecretUnreadable extends Error {
  /** The key id the ciphertext names; null for a `v1` value (names no key) or a malformed one. */
  readonly keyId: string | null;
  constructor(keyId: string | null, message?: string) {
    super(
      message ??
        (keyId === null
          ? "No configured encryption key decrypts the stored secret."
          : `No configured encryption key decrypts the stored secret (key id ${keyId}).`),
    );
    this.name = "SecretUnreadable";
    this.keyId = keyId;
  }
}

export interface SecretBox {
  /** Encrypts under the first key of the ring (`v2`, naming that key). */
  encrypt(plaintext: string): string;
  /** Decrypts with the key the value names (`v1`: every key in turn); throws SecretUnreadable. */
  decrypt(stored: string): string;
  /** The key id a stored value names, or null (`v1` or malformed). */
  keyIdOf(stored: string): string | null;
  /** True when the value is already `v2` under the first key (nothing for `reencrypt` to do). */
  isCurrent(stored: string): boolean;
  /** Id of the key that encrypts (the first of the ring). */
  readonly currentKeyId: string;
  /** Ids of every key of the ring, first first. */
  readonly keyIds: readonly string[];
}

/** The short, public name of a key: the first 4 bytes of its SHA-256, as 8 hex characters. */
export function keyIdOf(key: Buffer): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 8);
}

function gcmOpen(key: KeyObject, iv: string, tag: string, data: string, aad?: Buffer): string | null {
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
    if (aad) decipher.setAAD(aad);
    decipher.setAuthTag(Buffer.from(tag, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(data, "base64url")), decipher.final()]).toString(
      "utf8",
    );
  } catch {
    return null;
  }
}

/** A box over one key or a ring (first encrypts). Throws when the ring is empty or a key is not 32 bytes. */
export function createSecretBox(keys: Buffer | readonly Buffer[]): SecretBox {
  const ring = Buffer.isBuffer(keys) ? [keys] : [...keys];
  const first = ring[0];
  if (!first) throw new Error("The encryption key ring is empty.");
  if (ring.some((k) => k.length !== 32)) throw new Error("The encryption key must be 32 bytes.");
  const ids = ring.map(keyIdOf);
  // KeyObjects, made once: on Node 22+ a cipher given a Buffer key builds a key object per call,
  // 5-6 times slower than reusing one (and garbage for the collector); see docs/performance.md.
  const objects = ring.map((key) => createSecretKey(key));
  const firstObject = objects[0] as KeyObject;
  const byId = new Map<string, KeyObject>();
  objects.forEach((key, i) => {
    const id = ids[i] as string;
    if (!byId.has(id)) byId.set(id, key);
  });
  const currentKeyId = ids[0] as string;

  function keyIdOfStored(stored: string): string | null {
    const [version, id] = stored.split(":", 2);
    return version === "v2" && id !== undefined && /^[0-9a-f]{8}$/.test(id) ? id : null;
  }

  return {
    currentKeyId,
    keyIds: ids,
    keyIdOf: keyIdOfStored,
    isCurrent: (stored) => keyIdOfStored(stored) === currentKeyId,
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", firstObject, iv);
      cipher.setAAD(Buffer.from(currentKeyId));
      const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
      const tag = cipher.getAuthTag();
      return [
        "v2",
        currentKeyId,
        iv.toString("base64url"),
        tag.toString("base64url"),
        data.toString("base64url"),
      ].join(":");
    },
    decrypt(stored) {
      const parts = stored.split(":");
      if (parts[0] === "v2" && parts.length === 5) {
        const [, id, iv, tag, data] = parts as [string, string, string, string, string];
        const key = byId.get(id);
        const plain = key ? gcmOpen(key, iv, tag, data, Buffer.from(id)) : null;
        if (plain === null) throw new SecretUnreadable(/^[0-9a-f]{8}$/.test(id) ? id : null);
        return plain;
      }
      if (parts[0] === "v1" && parts.length === 4) {
        const [, iv, tag, data] = parts as [string, string, string, string];
        for (const key of objects) {
          const plain = gcmOpen(key, iv, tag, data);
          if (plain !== null) return plain;
        }
        throw new SecretUnreadable(null);
      }
      throw new SecretUnreadable(null, "Stored secret has an unknown format.");
    },
  };
}
