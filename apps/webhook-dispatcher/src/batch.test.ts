import { createBatcher } from "./batch.js";

/** A run function whose batches the test finishes by hand. */
function manualRun() {
  const batches: { items: string[]; finish(error?: Error): void }[] = [];
  const run = (items: readonly string[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push({
        items: [...items],
        finish: (error) => (error ? reject(error) : resolve(items.map((item) => `${item}!`))),
      });
    });
  return { batches, run };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe("createBatcher", () => {
  it("when items arrive while every slot is busy, then they leave together in the next batch", async () => {
    const { batches, run } = manualRun();
    const batched = createBatcher({ run, maxInFlight: 1, maxBatch: 10 });

    const first = batched("a");
    await turn();
    const rest = ["b", "c", "d"].map(batched);
    await turn();
    expect(batches.map((b) => b.items)).toEqual([["a"]]);

    batches[0]?.finish();
    expect(await first).toBe("a!");
    await turn();
    expect(batches.map((b) => b.items)).toEqual([["a"], ["b", "c", "d"]]);
    batches[1]?.finish();
    expect(await Promise.all(rest)).toEqual(["b!", "c!", "d!"]);
  });

  it("when items arrive in one turn with a free slot, then they share one batch without waiting", async () => {
    const { batches, run } = manualRun();
    const batched = createBatcher({ run, maxInFlight: 2, maxBatch: 2 });

    const all = ["a", "b", "c", "d", "e"].map(batched);
    await turn();

    // Two slots of at most two items each; the fifth waits for a slot.
    expect(batches.map((b) => b.items)).toEqual([
      ["a", "b"],
      ["c", "d"],
    ]);
    for (const b of batches) b.finish();
    await turn();
    expect(batches.map((b) => b.items).at(-1)).toEqual(["e"]);
    batches.at(-1)?.finish();
    expect(await Promise.all(all)).toEqual(["a!", "b!", "c!", "d!", "e!"]);
  });

  it("when two items have the same conflict key, then they never share a batch and keep their order", async () => {
    const { batches, run } = manualRun();
    const batched = createBatcher({
      run,
      maxInFlight: 1,
      maxBatch: 10,
      conflictKey: (item) => item[0] ?? "",
    });

    const all = ["x1", "y1", "x2", "z1"].map(batched);
    await turn();
    batches[0]?.finish();
    await turn();
    batches[1]?.finish();
    await Promise.all(all);

    expect(batches.map((b) => b.items)).toEqual([["x1", "y1", "z1"], ["x2"]]);
  });

  it("when a batch fails, then each of its items is rejected with the error and later items still run", async () => {
    const { batches, run } = manualRun();
    const batched = createBatcher({ run, maxInFlight: 1, maxBatch: 10 });

    const failing = ["a", "b"].map(batched);
    await turn();
    const later = batched("c");
    batches[0]?.finish(new Error("boom"));
    for (const p of failing) await expect(p).rejects.toThrow("boom");
    await turn();
    batches[1]?.finish();
    expect(await later).toBe("c!");
  });

  it("when run throws synchronously or returns the wrong number of values, then the batch is rejected", async () => {
    const throwing = createBatcher<string, string>({
      run: () => {
        throw new Error("sync");
      },
      maxInFlight: 1,
      maxBatch: 5,
    });
    await expect(throwing("a")).rejects.toThrow("sync");

    const short = createBatcher<string, string>({ run: async () => [], maxInFlight: 1, maxBatch: 5 });
    await expect(short("a")).rejects.toThrow("0 results for 1 items");
  });
});
