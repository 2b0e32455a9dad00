import { TimeoutError, withTimeout } from "./timeout.js";

describe("withTimeout", () => {
  it("passes a value or an error through when the promise settles in time", async () => {
    await expect(withTimeout(Promise.resolve(7), 1_000)).resolves.toBe(7);
    await expect(withTimeout(Promise.reject(new Error("boom")), 1_000)).rejects.toThrow("boom");
  });

  it("rejects with TimeoutError when the promise is slower than the deadline", async () => {
    const never = new Promise<number>(() => {});
    const error = await withTimeout(never, 10).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TimeoutError);
    expect((error as Error).message).toBe("no answer within 10 ms");
  });
});
