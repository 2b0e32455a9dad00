import { randomBytes } from "node:crypto";
import { createSecretBox, parseEncryptionKey } from "./secrets.js";

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
    const data = Buffer.from(parts[3] ?? "", "base64url");
    data[0] = (data[0] ?? 0) ^ 1;
    parts[3] = data.toString("base64url");
    expect(() => box.decrypt(parts.join(":"))).toThrow();
    expect(() => createSecretBox(randomBytes(32)).decrypt(stored)).toThrow();
  });

  it("parses hex and base64 keys of 32 bytes only", () => {
    const key = randomBytes(32);
    expect(parseEncryptionKey(key.toString("hex"))?.equals(key)).toBe(true);
    expect(parseEncryptionKey(key.toString("base64"))?.equals(key)).toBe(true);
    expect(parseEncryptionKey("short")).toBeNull();
  });
});
