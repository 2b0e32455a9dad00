import { randomBytes } from "node:crypto";
import { z } from "zod";
import { decodeEncryptionKey, EnvError, EnvFields, keyRing, multiHostProblem, parseEnv } from "./env.js";

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

describe("PostgreSQL URLs naming several hosts", () => {
  const schema = z.object({
    DATABASE_URL: EnvFields.DATABASE_URL,
    DATABASE_DIRECT_URL: EnvFields.DATABASE_DIRECT_URL,
  });

  it.each([
    ["DATABASE_URL", "postgresql://botdir@pg-a:5432,pg-b:5432/botdir?target_session_attrs=read-write"],
    ["DATABASE_URL", "postgresql://botdir@pg-a,pg-b/botdir"],
    ["DATABASE_DIRECT_URL", "postgresql:///botdir?host=pg-a,pg-b&user=botdir"],
    ["DATABASE_DIRECT_URL", "postgres://botdir@pg-a/botdir?target_session_attrs=primary"],
  ])("when %s is %s, then the env check refuses it with one line saying what to use instead", (name, url) => {
    const run = () => parseEnv(schema, { [name]: url });
    expect(run).toThrow(EnvError);
    expect(run).toThrow(
      new RegExp(`^Invalid environment: ${name} names several hosts .*PgBouncer.*DNS name`),
    );
    expect(() => run()).not.toThrow(/\n/);
  });

  it("when a URL names one host (a password with a comma included), then it is accepted", () => {
    const env = parseEnv(schema, {
      DATABASE_URL: "postgresql://botdir:a%2Cb@pgbouncer:6432/botdir?sslmode=require",
      DATABASE_DIRECT_URL: "postgresql://botdir:x,y@pgbouncer:6432/botdir_session",
    });
    expect(env.DATABASE_URL).toContain("pgbouncer:6432");
    expect(multiHostProblem("postgresql://postgres@127.0.0.1:5432/botdir")).toBeNull();
  });
});
