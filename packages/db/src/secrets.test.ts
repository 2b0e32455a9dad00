import { createCipheriv, randomBytes } from "node:crypto";
import { createSecretBox, keyIdOf, SecretUnreadable } from "./secrets.js";

/** A value in the pre-ring `v1` format (no key id), as stored before SECRET_ENCRYPTION_KEYS. */
function encryptV1(key: Buffer, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return ["v1", iv, cipher.getAuthTag(), data]
    .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
    .join(":");
}

function unreadable(fn: () => unknown): SecretUnreadable {
  try {
    fn();
  } catch (error) {
    if (error instanceof SecretUnreadable) return error;
    throw error;
  }
  throw new Error("expected SecretUnreadable");
}

describe("secret box", () => {
  const box = createSecretBox(randomBytes(32));

  it("round-trips a secret and never stores it in clear", () => {
    const stored = box.encrypt("whsec_abc");
    expect(stored).not.toContain("whsec_abc");
    expect(box.decrypt(stored)).toBe("whsec_abc");
  });

  it("uses a fresh IV, so the same secret encrypts differently each time", () => {
    expect(box.encrypt("x")).not.toBe(box.encrypt("x"));
  });

  it("refuses a tampered ciphertext and another key", () => {
    const stored = box.encrypt("secret");
    const parts = stored.split(":");
    const data = Buffer.from(parts[4] ?? "", "base64url");
    data[0] = (data[0] ?? 0) ^ 1;
    parts[4] = data.toString("base64url");
    expect(() => box.decrypt(parts.join(":"))).toThrow(SecretUnreadable);
    expect(() => createSecretBox(randomBytes(32)).decrypt(stored)).toThrow(SecretUnreadable);
  });
});

describe("key ring", () => {
  const oldKey = randomBytes(32);
  const newKey = randomBytes(32);

  it("when a ring has several keys, then the first encrypts and names its key id, and every key decrypts", () => {
    const before = createSecretBox([oldKey]);
    const storedOld = before.encrypt("old-secret");
    const ring = createSecretBox([newKey, oldKey]);
    const storedNew = ring.encrypt("new-secret");

    expect(ring.currentKeyId).toBe(keyIdOf(newKey));
    expect(ring.keyIdOf(storedNew)).toBe(keyIdOf(newKey));
    expect(ring.keyIdOf(storedOld)).toBe(keyIdOf(oldKey));
    expect(ring.isCurrent(storedNew)).toBe(true);
    expect(ring.isCurrent(storedOld)).toBe(false);
    expect(ring.decrypt(storedOld)).toBe("old-secret");
    expect(ring.decrypt(storedNew)).toBe("new-secret");
    // The key id is authenticated: renaming the key in the value breaks it.
    const renamed = storedNew.replace(keyIdOf(newKey), keyIdOf(oldKey));
    expect(unreadable(() => ring.decrypt(renamed)).keyId).toBe(keyIdOf(oldKey));
  });

  it("when the key a value names was removed, then decrypt throws SecretUnreadable carrying that key id", () => {
    const stored = createSecretBox([oldKey]).encrypt("s");
    const error = unreadable(() => createSecretBox([newKey]).decrypt(stored));
    expect(error.keyId).toBe(keyIdOf(oldKey));
    expect(error.message).toContain(keyIdOf(oldKey));
    expect(error.message).not.toContain("s\n");
  });

  it("when a value predates the ring (v1, no key id), then every key is tried", () => {
    const legacy = encryptV1(oldKey, "legacy");
    const ring = createSecretBox([newKey, oldKey]);
    expect(ring.keyIdOf(legacy)).toBeNull();
    expect(ring.isCurrent(legacy)).toBe(false);
    expect(ring.decrypt(legacy)).toBe("legacy");
    expect(unreadable(() => createSecretBox([newKey]).decrypt(legacy)).keyId).toBeNull();
  });

  it("when the stored value is malformed, then it is unreadable, not a crash of another kind", () => {
    expect(() => createSecretBox(newKey).decrypt("garbage")).toThrow(SecretUnreadable);
    expect(() => createSecretBox([])).toThrow("empty");
  });
});
