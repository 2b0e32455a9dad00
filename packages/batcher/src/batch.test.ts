/** The statement batcher on its own; the API's and vote-ingest's batches are tested with their routes. */
import { createBatcher } from "./batch.js";

/** A `run` that records its batches and answers when the test says so. */
function recorder<K>() {
  const batches: K[][] = [];
  const pending: { keys: K[]; resolve(values: string[]): void; reject(error: unknown): void }[] = [];
  const run = (keys: readonly K[]) =>
    new Promise<readonly string[]>((resolve, reject) => {
      batches.push([...keys]);
      pending.push({ keys: [...keys], resolve, reject });
    });
  /** Answers the oldest unanswered batch with `answer(key)` for each key. */
  const answerNext = (answer: (key: K) => string = (key) => `v:${String(key)}`) => {
    const next = pending.shift();
    if (!next) throw new Error("no batch is waiting");
    next.resolve(next.keys.map(answer));
  };
  const failNext = (error: unknown) => pending.shift()?.reject(error);
  return { batches, run, answerNext, failNext };
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("createBatcher", () => {
  it("when keys arrive in the same event-loop turn, then they share one run and each gets its own value", async () => {
    const r = recorder<number>();
    const load = createBatcher({ run: r.run, maxInFlight: 4, maxBatch: 64 });
    const answers = Promise.all([load(1), load(2), load(3)]);
    await turn();
    expect(r.batches).toEqual([[1, 2, 3]]);
    r.answerNext();
    await expect(answers).resolves.toEqual(["v:1", "v:2", "v:3"]);
  });

  it("when more keys than maxBatch wait, then they are split into batches of at most maxBatch", async () => {
    const r = recorder<number>();
    const load = createBatcher({ run: r.run, maxInFlight: 4, maxBatch: 2 });
    const answers = Promise.all([1, 2, 3, 4, 5].map(load));
    await turn();
    expect(r.batches).toEqual([[1, 2], [3, 4], [5]]);
    r.answerNext();
    r.answerNext();
    r.answerNext();
    await expect(answers).resolves.toEqual(["v:1", "v:2", "v:3", "v:4", "v:5"]);
  });

  it("when every slot is busy, then later keys wait and leave together as soon as a batch finishes", async () => {
    const r = recorder<string>();
    const load = createBatcher({ run: r.run, maxInFlight: 1, maxBatch: 64 });
    const first = load("a");
    await turn();
    const later = [load("b"), load("c")];
    await turn();
    const last = load("d");
    await turn();
    expect(r.batches).toEqual([["a"]]); // nothing else left while "a" ran
    r.answerNext();
    await expect(first).resolves.toBe("v:a");
    await turn();
    expect(r.batches).toEqual([["a"], ["b", "c", "d"]]);
    r.answerNext();
    await expect(Promise.all([...later, last])).resolves.toEqual(["v:b", "v:c", "v:d"]);
  });

  it("when two keys conflict, then they never share a batch and keep their arrival order", async () => {
    const r = recorder<{ bot: string; n: number }>();
    const load = createBatcher({
      run: r.run,
      maxInFlight: 1,
      maxBatch: 64,
      conflictKey: (key) => key.bot,
    });
    const answers = Promise.all(
      [
        { bot: "x", n: 1 },
        { bot: "y", n: 2 },
        { bot: "x", n: 3 },
        { bot: "x", n: 4 },
        { bot: "z", n: 5 },
      ].map(load),
    );
    const answer = (key: { n: number }) => String(key.n);
    await turn();
    expect(r.batches.map((b) => b.map((k) => k.n))).toEqual([[1, 2, 5]]);
    r.answerNext(answer);
    await turn();
    expect(r.batches.map((b) => b.map((k) => k.n))).toEqual([[1, 2, 5], [3]]);
    r.answerNext(answer);
    await turn();
    expect(r.batches.map((b) => b.map((k) => k.n))).toEqual([[1, 2, 5], [3], [4]]);
    r.answerNext(answer);
    await expect(answers).resolves.toEqual(["1", "2", "3", "4", "5"]);
  });

  it("when a batch of several fails, then each key runs once more alone: one key's failure stays its own", async () => {
    const r = recorder<number>();
    const load = createBatcher({ run: r.run, maxInFlight: 4, maxBatch: 64 });
    const settled = Promise.allSettled([load(1), load(2), load(3)]);
    await turn();
    r.failNext(new Error("row 2 refused"));
    await turn();
    expect(r.batches).toEqual([[1, 2, 3], [1], [2], [3]]);
    r.answerNext();
    r.failNext(new Error("row 2 refused"));
    r.answerNext();
    const outcomes = await settled;
    expect(outcomes).toEqual([
      { status: "fulfilled", value: "v:1" },
      { status: "rejected", reason: new Error("row 2 refused") },
      { status: "fulfilled", value: "v:3" },
    ]);
  });

  it("when isolateFailures is off, then a failed batch rejects all its requests at once", async () => {
    const r = recorder<number>();
    const load = createBatcher({ run: r.run, maxInFlight: 4, maxBatch: 64, isolateFailures: false });
    const settled = Promise.allSettled([load(1), load(2)]);
    await turn();
    r.failNext(new Error("redis down"));
    expect((await settled).map((o) => o.status)).toEqual(["rejected", "rejected"]);
    expect(r.batches).toEqual([[1, 2]]);
  });

  it("when a batch of one fails, then its request is rejected with the error and the next batch still runs", async () => {
    const r = recorder<number>();
    const load = createBatcher({ run: r.run, maxInFlight: 1, maxBatch: 64 });
    const failed = load(1).then(
      () => "resolved",
      (e: Error) => e.message,
    );
    await turn();
    const next = load(2);
    r.failNext(new Error("connection terminated"));
    await expect(failed).resolves.toBe("connection terminated");
    await turn();
    expect(r.batches).toEqual([[1], [2]]);
    r.answerNext();
    await expect(next).resolves.toBe("v:2");
  });

  /** A batcher whose runs fail with `failures` in order (null: that run succeeds), retrying 40P01 alone. */
  function failingInTurn(failures: (Error | null)[]) {
    const calls: number[][] = [];
    const load = createBatcher<number, string>({
      run: async (keys) => {
        calls.push([...keys]);
        const failure = failures.shift();
        if (failure) throw failure;
        return keys.map((k) => `v:${k}`);
      },
      retryAlone: (error) => (error as { code?: string }).code === "40P01",
      maxInFlight: 1,
      maxBatch: 8,
    });
    return { load, calls };
  }
  const deadlock = Object.assign(new Error("deadlock detected"), { code: "40P01" });

  it("when a key alone fails with an error retryAlone accepts, then it runs once more; any other error, or a second failure, reaches the caller", async () => {
    const failures: (Error | null)[] = [deadlock, deadlock, deadlock, new Error("constraint refused")];
    const { load, calls } = failingInTurn(failures);
    // Deadlock, then deadlock again: the retry is once only, the caller sees the second.
    await expect(load(1)).rejects.toBe(deadlock);
    // Deadlock, then a refusal: the refusal is what the caller sees.
    await expect(load(2)).rejects.toThrow("constraint refused");
    // Nothing left to fail.
    await expect(load(3)).resolves.toBe("v:3");
    expect(calls).toEqual([[1], [1], [2], [2], [3]]);

    failures.push(deadlock);
    await expect(load(4)).resolves.toBe("v:4");
    expect(calls.slice(5)).toEqual([[4], [4]]);
  });

  it("when a batch of several fails, then only the keys run alone are retried as retryAlone allows, not the batch", async () => {
    const { load, calls } = failingInTurn([deadlock, deadlock, null, null]);
    await expect(Promise.all([load(1), load(2)])).resolves.toEqual(["v:1", "v:2"]);
    // The batch failed; key 1 alone failed too and ran once more; key 2 alone succeeded.
    expect(calls).toEqual([[1, 2], [1], [2], [1]]);
  });

  it("when run throws synchronously or answers the wrong number of values, then the requests are rejected", async () => {
    const throwing = createBatcher<number, string>({
      run: () => {
        throw new Error("bad statement");
      },
      maxInFlight: 1,
      maxBatch: 8,
    });
    await expect(Promise.all([throwing(1), throwing(2)])).rejects.toThrow("bad statement");

    const short = createBatcher<number, string>({ run: async () => [], maxInFlight: 1, maxBatch: 8 });
    const outcomes = await Promise.allSettled([short(1), short(2)]);
    expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected"]);
    expect((outcomes[0] as PromiseRejectedResult).reason.message).toBe("batch returned 0 results for 1 key");
  });

  it("reports the size of every batch it sends", async () => {
    const r = recorder<number>();
    const sizes: number[] = [];
    const load = createBatcher({ run: r.run, maxInFlight: 4, maxBatch: 3, onBatch: (n) => sizes.push(n) });
    const answers = Promise.all([1, 2, 3, 4].map(load));
    await turn();
    r.answerNext();
    r.answerNext();
    await answers;
    expect(sizes).toEqual([3, 1]);
  });

  it("refuses limits below 1", () => {
    expect(() => createBatcher({ run: async () => [], maxInFlight: 0, maxBatch: 1 })).toThrow(RangeError);
    expect(() => createBatcher({ run: async () => [], maxInFlight: 1, maxBatch: 0 })).toThrow(RangeError);
  });
});
