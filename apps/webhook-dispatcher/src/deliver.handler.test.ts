import { cachedDecryption } from "./deliver.handler.js";

describe("cachedDecryption", () => {
  it("when the same stored secret is decrypted again, then the box is asked once and the same secret comes back", () => {
    const asked: string[] = [];
    const decrypt = cachedDecryption({
      decrypt: (stored) => {
        asked.push(stored);
        return `clear:${stored}`;
      },
    });
    expect(decrypt("v2:k1:aaa")).toBe("clear:v2:k1:aaa");
    expect(decrypt("v2:k1:aaa")).toBe("clear:v2:k1:aaa");
    expect(decrypt("v2:k1:bbb")).toBe("clear:v2:k1:bbb");
    expect(asked).toEqual(["v2:k1:aaa", "v2:k1:bbb"]);
  });

  it("when the box cannot decrypt a value, then every call throws and nothing is remembered", () => {
    let calls = 0;
    const decrypt = cachedDecryption({
      decrypt: () => {
        calls++;
        throw new Error("no key decrypts it");
      },
    });
    expect(() => decrypt("v2:gone:ccc")).toThrow("no key decrypts it");
    expect(() => decrypt("v2:gone:ccc")).toThrow("no key decrypts it");
    expect(calls).toBe(2);
  });
});
