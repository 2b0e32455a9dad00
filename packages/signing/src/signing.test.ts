import { createHmac } from "node:crypto";
import { safeEqual, secretMatcher, sign, verify } from "./index.js";

describe("sign", () => {
  it("produces sha256= and the hex HMAC-SHA256 of the raw body", () => {
    const body = '{"event":"vote.create","bot_id":"123456789012345678"}';
    const expected = createHmac("sha256", "s3cret").update(body).digest("hex");
    expect(sign("s3cret", body)).toBe(`sha256=${expected}`);
  });

  it("signs bytes, so a different serialisation of the same JSON gets a different signature", () => {
    expect(sign("k", '{"a":1,"b":2}')).not.toBe(sign("k", '{"b":2,"a":1}'));
  });

  it("treats a Buffer body and the same string identically", () => {
    expect(sign("k", Buffer.from("héllo"))).toBe(sign("k", "héllo"));
  });
});

describe("verify", () => {
  const body = '{"user_id":"1"}';
  const header = sign("key", body);

  it("accepts the signature of the exact body", () => {
    expect(verify("key", body, header)).toBe(true);
  });

  it("accepts an upper-case hex digest and prefix", () => {
    expect(verify("key", body, `SHA256=${header.slice(7).toUpperCase()}`)).toBe(true);
  });

  it("rejects another key, another body, a missing header and malformed headers", () => {
    expect(verify("other", body, header)).toBe(false);
    expect(verify("key", `${body} `, header)).toBe(false);
    expect(verify("key", body, undefined)).toBe(false);
    expect(verify("key", body, null)).toBe(false);
    expect(verify("key", body, header.slice(7))).toBe(false);
    expect(verify("key", body, "sha256=zz")).toBe(false);
    expect(verify("key", body, `sha1=${header.slice(7)}`)).toBe(false);
    expect(verify("key", body, `${header}00`)).toBe(false);
  });
});

describe("safeEqual", () => {
  it("compares secrets of any length", () => {
    expect(safeEqual("abc", "abc")).toBe(true);
    expect(safeEqual("abc", "abcd")).toBe(false);
    expect(safeEqual("", "")).toBe(true);
  });
});

describe("secretMatcher", () => {
  it("accepts exactly the secret it was made for, whatever the candidate's length", () => {
    const matches = secretMatcher("internal-key-0123456789");
    expect(matches("internal-key-0123456789")).toBe(true);
    expect(matches(Buffer.from("internal-key-0123456789"))).toBe(true);
    expect(matches("internal-key-012345678")).toBe(false);
    expect(matches("internal-key-01234567890")).toBe(false);
    expect(matches("")).toBe(false);
  });
});
