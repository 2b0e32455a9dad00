import { memorySeenStore } from "./adapters.js";

describe("memorySeenStore", () => {
  it("when an id comes again, then add is false; the least recently seen id is forgotten first", () => {
    const seen = memorySeenStore(2);
    expect([seen.add("a"), seen.add("b"), seen.add("a")]).toEqual([true, true, false]);
    expect(seen.add("c")).toBe(true); // evicts b, the least recently seen
    expect(seen.add("a")).toBe(false);
    expect(seen.add("b")).toBe(true);
  });
});
