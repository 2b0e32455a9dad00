/**
 * Webhook secrets must be sent verbatim, so they cannot be hashed: they are encrypted at rest with
 * AES-256-GCM under a key from the environment (SECRET_ENCRYPTION_KEY, 32 bytes, hex or base64).
 * Stored form: `v1:<iv b64url>:<tag b64url>:<ciphertext b64url>`.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

export interface SecretBox {
  encrypt(plaintext: string): string;
  decrypt(stored: string): string;
}

export function parseEncryptionKey(value: string): Buffer | null {
  const trimmed = value.trim();
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) return Buffer.from(trimmed, "hex");
  const b64 = Buffer.from(trimmed, "base64");
  return b64.length === 32 ? b64 : null;
}

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error("The encryption key must be 32 bytes.");
  return {
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
      const tag = cipher.getAuthTag();
      return ["v1", iv.toString("base64url"), tag.toString("base64url"), data.toString("base64url")].join(
        ":",
      );
    },
    decrypt(stored) {
      const [version, iv, tag, data] = stored.split(":");
      if (version !== "v1" || !iv || !tag || data === undefined) {
        throw new Error("Stored secret has an unknown format.");
      }
      const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
      decipher.setAuthTag(Buffer.from(tag, "base64url"));
      return Buffer.concat([decipher.update(Buffer.from(data, "base64url")), decipher.final()]).toString(
        "utf8",
      );
    },
  };
}
