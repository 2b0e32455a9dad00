/**
 * The PostgreSQL claim/record protocol, driven step by step with a manual clock: what a duplicate
 * job, a crashed attempt and a replica that outlived its claim may and may not record.
 */
import { createTestDatabase, seedBot, type TestDatabase } from "@botdir/db/testing";
import { ManualClock } from "@botdir/schema";
import { createDeliverHandler } from "../src/deliver.handler.js";
import { claimAttempt, recordAttempt } from "../src/deliveries.js";
import type { AttemptOutcome } from "../src/http-client.js";
import { createWebhookSender } from "../src/http-client.js";
import {
  attemptRows,
  claimOptions,
  configureWebhook,
  DELAYS,
  deliveryRow,
  fail,
  LEASE_MS,
  ok,
  type Receiver,
  secretBox,
  seedDelivery,
  silentLogger,
  startReceiver,
} from "./support.js";

let t: TestDatabase;
let receiver: Receiver;

beforeAll(async () => {
  t = await createTestDatabase();
  receiver = await startReceiver(() => ({ status: 204, delayMs: 100 }));
});

afterAll(async () => {
  await receiver.close();
  await t.drop();
});

async function arrange(clock: ManualClock) {
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, receiver.url(), "secret");
  return seedDelivery(t.db, bot.id, { votedAt: clock.now() });
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
  return recordAttempt(t.db, {
    deliveryId: delivery.id,
    botId: delivery.botId,
    attemptNumber: claim.attemptNumber,
    leaseUntil: claim.leaseUntil,
    attemptedAt: clock.now(),
    outcome,
    now: clock.now(),
    retryDelays: DELAYS,
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
    expect((await deliveryRow(t.db, delivery.id)).attemptsMade).toBe(1);
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
      const row = await deliveryRow(t.db, delivery.id);
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
    const row = await deliveryRow(t.db, delivery.id);
    expect(row.state).toBe("failed");
    expect(row.completedAt).toEqual(clock.now());
    expect(await claimAttempt(t.db, delivery.id, claimOptions(clock))).toEqual({
      kind: "done",
      reason: "failed",
    });
    expect(await attemptRows(t.db, delivery.id)).toHaveLength(5);
  });

  it("when a claim's lease expires (the process died), then that attempt is recorded as interrupted and the next follows the schedule", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    const started = clock.now();
    const lost = await claimOrFail(delivery.id, clock);

    clock.advance(LEASE_MS + 1);
    const afterCrash = await claimAttempt(t.db, delivery.id, claimOptions(clock));
    expect(afterCrash).toEqual({ kind: "early", at: new Date(clock.now().getTime() + DELAYS[0]!) });
    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind, a.attemptedAt])).toEqual([
      [1, null, "interrupted", started],
    ]);

    // The "dead" process was only slow and now reports success: its claim is gone, nothing recorded.
    expect(await record(delivery, lost, ok, clock)).toEqual({ kind: "superseded" });
    clock.advance(DELAYS[0]!);
    const next = await claimOrFail(delivery.id, clock);
    expect(next.attemptNumber).toBe(2);
    expect(await record(delivery, next, ok, clock)).toEqual({ kind: "delivered" });

    const final = await attemptRows(t.db, delivery.id);
    expect(final.map((a) => [a.attemptNumber, a.errorKind])).toEqual([
      [1, "interrupted"],
      [2, null],
    ]);
    expect(final.filter((a) => a.errorKind === null)).toHaveLength(1);
    expect((await deliveryRow(t.db, delivery.id)).state).toBe("delivered");
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
    const row = await deliveryRow(t.db, delivery.id);
    expect(row.state).toBe("failed");
    expect(row.attemptsMade).toBe(5);
    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => a.attemptNumber)).toEqual([1, 2, 3, 4, 5]);
    expect(attempts[4]!.errorKind).toBe("interrupted");
  });

  it("when the secret cannot be decrypted, then the claim fails without using an attempt", async () => {
    const clock = new ManualClock();
    const delivery = await arrange(clock);
    await t.db.prisma.bot.update({
      where: { id: delivery.botId },
      data: { webhookSecretEncrypted: "v1:bad:bad:bad" },
    });

    await expect(claimAttempt(t.db, delivery.id, claimOptions(clock))).rejects.toThrow();
    const row = await deliveryRow(t.db, delivery.id);
    expect(row.attemptsMade).toBe(0);
    expect(row.leaseUntil).toBeNull();
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
    expect((await deliveryRow(t.db, delivery.id)).attemptsMade).toBe(1);
  });

  it("when two handlers run the same delivery at once (a duplicate job), then one request is sent and one attempt recorded", async () => {
    const clock = new ManualClock(new Date());
    const delivery = await arrange(clock);
    const before = receiver.requests.length;
    const deliver = createDeliverHandler({
      db: t.db,
      secrets: secretBox,
      send: createWebhookSender({ timeoutMs: 2_000, allowPrivateTargets: true }),
      clock,
      logger: silentLogger,
      retryDelays: DELAYS,
      leaseMs: LEASE_MS,
    });

    const results = await Promise.all([
      deliver({ deliveryId: delivery.id }),
      deliver({ deliveryId: delivery.id }),
    ]);

    expect(results.map((r) => r.kind).sort()).toEqual(["delivered", "wait"]);
    expect(receiver.requests.length - before).toBe(1);
    expect(await attemptRows(t.db, delivery.id)).toHaveLength(1);
  });
});
