import { randomBytes } from "node:crypto";
import { decodeEncryptionKey, keyRing } from "./env.js";

describe("encryption keys", () => {
  it("parses hex and base64 keys of 32 bytes only", () => {
    const key = randomBytes(32);
    expect(decodeEncryptionKey(key.toString("hex"))?.equals(key)).toBe(true);
    expect(decodeEncryptionKey(key.toString("base64"))?.equals(key)).toBe(true);
    expect(decodeEncryptionKey(key.toString("base64url"))?.equals(key)).toBe(true);
    expect(decodeEncryptionKey("short")).toBeNull();
  });

  it("when a key is not exactly 32 bytes or not canonical, then it is refused (no lenient decoding)", () => {
    expect(decodeEncryptionKey("a".repeat(44))).toBeNull(); // 33 bytes of base64
    expect(decodeEncryptionKey(`${"A".repeat(42)}!=`)).toBeNull(); // outside the alphabet
    expect(decodeEncryptionKey(`${"A".repeat(42)}B=`)).toBeNull(); // non-zero padding bits
    expect(decodeEncryptionKey(randomBytes(31).toString("base64"))).toBeNull();
    expect(decodeEncryptionKey(randomBytes(33).toString("hex"))).toBeNull();
    expect(() => keyRing({ SECRET_ENCRYPTION_KEYS: `${randomBytes(32).toString("hex")},nope` })).toThrow(
      /SECRET_ENCRYPTION_KEYS/,
    );
  });
});
