/**
 * The PostgreSQL claim/record protocol, driven step by step with a manual clock: what a duplicate
 * job, a crashed attempt and a replica that outlived its claim may and may not record.
 */
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { DeliverDeps } from "../src/deliver.handler.js";
import { claimAttempt, createDeliveryStore, type DeliveryStore, recordAttempt } from "../src/deliveries.js";
import type { AttemptOutcome } from "../src/http-client.js";
import { createWebhookSender } from "../src/http-client.js";
import {
  claimOptions,
  DELAYS,
  fail,
  LEASE_MS,
  ok,
  type Receiver,
  recordInput,
  secretBox,
  startReceiver,
  useDeliveryDatabase,
} from "./support.js";

const t = useDeliveryDatabase();
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 204, delayMs: 100 }));
});

afterAll(async () => {
  await receiver.close();
});

async function arrange(clock: ManualClock) {
  const { newDelivery } = await t.webhookBot(receiver.url(), { secret: "secret", clock });
  return newDelivery();
}

async function claimOrFail(id: string, clock: ManualClock) {
  const claim = await claimAttempt(t.db, id, claimOptions(clock));
  if (claim.kind !== "claimed") throw new Error(`expected a claim, got ${claim.kind}`);
  return claim;
}

function record(
  delivery: { id: string; botId: string },
  claim: { attemptNumber: number; leaseUntil: Date },
  outcome: AttemptOutcome,
  clock: ManualClock,
) {
  return recordAttempt(t.db, recordInput(delivery, claim, outcome, clock));
}

/** The deliver handler on the test database, sending for real, with `overrides` (a store, a lease...). */
function handler(clock: ManualClock, overrides: Partial<DeliverDeps> = {}) {
  return t.handler(clock, {
    send: createWebhookSender({ timeoutMs: 2_000, allowPrivateTargets: true }),
    ...overrides,
  });
}

describe("claiming and recording attempts", () => {
  it("when an attempt is in flight, then a second claim is told to wait until the lease ends and uses no attempt", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);

    const first = await claimOrFail(delivery.id, clock);
    const second = await claimAttempt(t.db, delivery.id, claimOptions(clock));

    expect(first.attemptNumber).toBe(1);
    expect(first.target.secret).toBe("secret");
    expect(second).toEqual({ kind: "busy", until: first.leaseUntil });
    expect((await t.row(delivery.id)).attemptsMade).toBe(1);
  });

  it("when an attempt fails, then next_attempt_at moves to now + the delay for that attempt and an earlier claim waits", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);

    for (const [n, delay] of DELAYS.entries()) {
      const claim = await claimOrFail(delivery.id, clock);
      expect(claim.attemptNumber).toBe(n + 1);
      const result = await record(delivery, claim, fail, clock);
      const expectedNext = new Date(clock.now().getTime() + delay);
      expect(result).toEqual({ kind: "retry", nextAttemptAt: expectedNext });
      const row = await t.row(delivery.id);
      expect(row.nextAttemptAt).toEqual(expectedNext);
      expect(row.state).toBe("pending");
      expect(row.leaseUntil).toBeNull();

      clock.advance(delay - 1_000);
      expect(await claimAttempt(t.db, delivery.id, claimOptions(clock))).toEqual({
        kind: "early",
        at: expectedNext,
      });
      clock.advance(1_000);
    }
    const fifth = await claimOrFail(delivery.id, clock);
    expect(await record(delivery, fifth, fail, clock)).toEqual({ kind: "failed" });
    const row = await t.row(delivery.id);
    expect(row.state).toBe("failed");
    expect(row.completedAt).toEqual(clock.now());
    expect(await claimAttempt(t.db, delivery.id, claimOptions(clock))).toEqual({
      kind: "done",
      reason: "failed",
    });
    expect(await t.attempts(delivery.id)).toHaveLength(5);
  });

  it("when a claim's lease expires (the process died), then that attempt is recorded as interrupted and the next follows the schedule", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    const started = clock.now();
    const lost = await claimOrFail(delivery.id, clock);

    clock.advance(LEASE_MS + 1);
    const afterCrash = await claimAttempt(t.db, delivery.id, claimOptions(clock));
    expect(afterCrash).toEqual({ kind: "early", at: new Date(clock.now().getTime() + DELAYS[0]!) });
    const attempts = await t.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind, a.attemptedAt])).toEqual([
      [1, null, "interrupted", started],
    ]);

    // The "dead" process was only slow and now reports success: its claim is gone, nothing recorded.
    expect(await record(delivery, lost, ok, clock)).toEqual({ kind: "superseded" });
    clock.advance(DELAYS[0]!);
    const next = await claimOrFail(delivery.id, clock);
    expect(next.attemptNumber).toBe(2);
    expect(await record(delivery, next, ok, clock)).toEqual({ kind: "delivered" });

    const final = await t.attempts(delivery.id);
    expect(final.map((a) => [a.attemptNumber, a.errorKind])).toEqual([
      [1, "interrupted"],
      [2, null],
    ]);
    expect(final.filter((a) => a.errorKind === null)).toHaveLength(1);
    expect((await t.row(delivery.id)).state).toBe("delivered");
  });

  it("when the fifth attempt is interrupted, then the delivery is failed and no sixth attempt can be claimed", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    for (const delay of DELAYS) {
      await record(delivery, await claimOrFail(delivery.id, clock), fail, clock);
      clock.advance(delay);
    }
    await claimOrFail(delivery.id, clock); // the fifth, then the process dies
    clock.advance(LEASE_MS + 1);

    expect(await claimAttempt(t.db, delivery.id, claimOptions(clock))).toEqual({
      kind: "done",
      reason: "exhausted",
    });
    const row = await t.row(delivery.id);
    expect(row.state).toBe("failed");
    expect(row.attemptsMade).toBe(5);
    const attempts = await t.attempts(delivery.id);
    expect(attempts.map((a) => a.attemptNumber)).toEqual([1, 2, 3, 4, 5]);
    expect(attempts[4]!.errorKind).toBe("interrupted");
  });

  it("when no key decrypts the secret, then the claim stands and is reported unreadable (the attempt is used)", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    await t.db.prisma.bot.update({
      where: { id: delivery.botId },
      data: { webhookSecretEncrypted: "v1:bad:bad:bad" },
    });

    const claim = await claimAttempt(t.db, delivery.id, claimOptions(clock));

    expect(claim).toMatchObject({ kind: "unreadable", attemptNumber: 1, botId: delivery.botId });
    const row = await t.row(delivery.id);
    expect(row.attemptsMade).toBe(1);
    expect(row.leaseUntil).not.toBeNull();
  });

  it("when no key decrypts the secret, then the delivery fails at once with one secret_unreadable attempt, one error line naming the bot and key id, and no request", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    const before = receiver.requests.length;
    const errors: { fields: Record<string, unknown>; message: string }[] = [];
    const logger = {
      ...silentLogger,
      error: (fields: Record<string, unknown>, message: string) => errors.push({ fields, message }),
    };
    const unreadable = Object.assign(new Error("No configured encryption key decrypts the stored secret."), {
      keyId: "0badc0de",
    });
    const deliver = handler(clock, {
      secrets: {
        ...secretBox,
        decrypt: () => {
          throw unreadable;
        },
      },
      logger: logger as typeof silentLogger,
    });

    const first = await deliver({ deliveryId: delivery.id });
    const again = await deliver({ deliveryId: delivery.id });

    expect(first).toEqual({ kind: "failed", attemptNumber: 1, errorKind: "secret_unreadable" });
    expect(again).toEqual({ kind: "done", reason: "failed" });
    expect((await t.row(delivery.id)).state).toBe("failed");
    const attempts = await t.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "secret_unreadable"],
    ]);
    expect(receiver.requests.length).toBe(before);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.fields).toMatchObject({
      botId: delivery.botId,
      keyId: "0badc0de",
      deliveryId: delivery.id,
    });
  });

  it("when several claims race for one delivery, then exactly one is claimed and the others wait for its lease", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);

    const results = await Promise.all(
      Array.from({ length: 5 }, () => claimAttempt(t.db, delivery.id, claimOptions(clock))),
    );

    const claimed = results.filter((r) => r.kind === "claimed");
    expect(claimed).toHaveLength(1);
    const lease = (claimed[0] as { leaseUntil: Date }).leaseUntil;
    expect(results.filter((r) => r.kind === "busy")).toEqual(
      Array.from({ length: 4 }, () => ({ kind: "busy", until: lease })),
    );
    expect((await t.row(delivery.id)).attemptsMade).toBe(1);
  });

  it("when two handlers run the same delivery at once (a duplicate job), then one request is sent and one attempt recorded", async () => {
    const clock = new ManualClock(new Date());
    const delivery = await arrange(clock);
    const before = receiver.requests.length;
    const deliver = handler(clock);

    const results = await Promise.all([
      deliver({ deliveryId: delivery.id }),
      deliver({ deliveryId: delivery.id }),
    ]);

    expect(results.map((r) => r.kind).sort()).toEqual(["delivered", "wait"]);
    expect(receiver.requests.length - before).toBe(1);
    expect(await t.attempts(delivery.id)).toHaveLength(1);
  });
});

describe("durable outcomes: recording an attempt retries within the claim", () => {
  const real = () => createDeliveryStore(t.db, { maxBatch: 50, maxInFlight: 2 });
  /** A real store whose records go through `record` (handed the real store's record). */
  function withRecord(
    record: (
      input: Parameters<DeliveryStore["record"]>[0],
      real: DeliveryStore["record"],
    ) => ReturnType<DeliveryStore["record"]>,
  ): DeliveryStore {
    const store = real();
    return { claim: store.claim, record: (input) => record(input, store.record) };
  }

  it("when the record fails once after a 2xx, then it is tried again and the delivery ends delivered with one attempt", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    let calls = 0;
    const flaky = withRecord((input, record) => {
      calls++;
      return calls === 1 ? Promise.reject(new Error("Connection terminated unexpectedly")) : record(input);
    });

    const result = await handler(clock, { store: flaky })({ deliveryId: delivery.id });

    expect(result).toEqual({ kind: "delivered", attemptNumber: 1 });
    expect(calls).toBe(2);
    expect((await t.row(delivery.id)).state).toBe("delivered");
    const attempts = await t.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
  });

  it("when recording is slow, then the handler reports the HTTP attempt's own duration (the receiver's pace), not claim + record", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    const slow = withRecord(async (input, record) => {
      await new Promise((r) => setTimeout(r, 3_000));
      return record(input);
    });
    const sent: number[] = [];
    const started = performance.now();

    const result = await handler(clock, { store: slow })(
      { deliveryId: delivery.id },
      undefined,
      (outcome) => {
        sent.push(outcome.durationMs);
      },
    );

    expect(result.kind).toBe("delivered");
    expect(performance.now() - started).toBeGreaterThanOrEqual(3_000);
    // The receiver answers after 100 ms: that is the pace the worker's fairness learns. The bound
    // leaves a loaded machine fifteen times that and is half the 3 s the record takes.
    expect(sent).toHaveLength(1);
    expect(sent[0]).toBeGreaterThanOrEqual(90);
    expect(sent[0]).toBeLessThan(1_500);
  });

  it("when the record committed but its reply was lost, then the retry recognises its own write instead of reporting a takeover", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    let calls = 0;
    const lostReply = withRecord(async (input, record) => {
      calls++;
      const result = await record(input);
      if (calls === 1) throw new Error("Connection terminated unexpectedly");
      return result;
    });

    const result = await handler(clock, { store: lostReply })({ deliveryId: delivery.id });

    expect(result).toEqual({ kind: "delivered", attemptNumber: 1 });
    expect(await t.attempts(delivery.id)).toHaveLength(1);
  });

  it("when the record keeps failing, then the handler gives up before the lease ends and nothing is recorded", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    let calls = 0;
    let firstRecordAt = 0;
    const down = withRecord(() => {
      if (calls++ === 0) firstRecordAt = performance.now();
      return Promise.reject(new Error("the database system is shutting down"));
    });

    await expect(
      handler(clock, { store: down, leaseMs: 1_500 })({ deliveryId: delivery.id }),
    ).rejects.toThrow(/shutting down/);

    // Measured from the first record (the manual clock stands still, so 1.5 s of lease are left
    // then): the claim and the HTTP attempt before it are not part of the window.
    expect(performance.now() - firstRecordAt).toBeLessThan(1_500);
    expect(calls).toBeGreaterThan(2);
    expect(await t.attempts(delivery.id)).toHaveLength(0);
    expect((await t.row(delivery.id)).state).toBe("pending");
  });
});
