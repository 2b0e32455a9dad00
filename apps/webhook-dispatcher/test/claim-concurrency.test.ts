/**
 * The claim, record and redeliver statements read the delivery row they write under a row lock.
 * Done in one statement (a locking CTE under the UPDATE) this deadlocks when claims of one delivery
 * meet other writers of its row while other transactions key-share lock it (an attempt's foreign
 * key does): the lock follows the row to its newest version, but the UPDATE's own scan can reach
 * the older one, whose tuple lock a queued writer holds while it waits for us. The statements now
 * lock in one statement and write in the next (migration 20261125130000_dispatcher_lock_then_write).
 * The statements are called directly or through the delivery store with a failing batch failing
 * its callers: a retry (BullMQ's, the batcher's) would run a deadlock victim once more and hide it.
 */
import { redeliver } from "@botdir/db";
import { createTestDatabase, seedBot, type TestDatabase } from "@botdir/db/testing";
import {
  type ClaimOptions,
  claimAttempt,
  createDeliveryStore,
  type DeliveryStore,
  recordAttempt,
} from "../src/deliveries.js";
import { configureWebhook, fail, LEASE_MS, ok, secretBox, seedDelivery } from "./support.js";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase({ poolMax: 16 });
});

afterAll(async () => {
  await t.drop();
});

/** Every retry due at once, so a run of attempts keeps claiming. */
const NO_DELAYS = [0, 0, 0, 0];

function options(): ClaimOptions {
  return {
    now: new Date(),
    leaseMs: LEASE_MS,
    earlySlackMs: 250,
    retryDelays: NO_DELAYS,
    decryptSecret: (s) => secretBox.decrypt(s),
  };
}

/** Starts a fresh series of the delivery (as a redelivery does), whatever state it is in. */
const RESET_SQL = `UPDATE webhook_deliveries
    SET state = 'pending', series = series + 1, attempts_made = 0, next_attempt_at = now(),
        lease_until = NULL, attempt_started_at = NULL, completed_at = NULL
  WHERE id = $1`;

/** What a failed statement said, as "code message". */
function describeError(error: unknown): string {
  const e = error as { code?: string; message?: string };
  return `${e.code ?? ""} ${e.message ?? String(error)}`;
}

/**
 * Runs `workers` loops of `each` calls of `work` while 2 connections keep rewriting the rows with
 * `plainSql` ($1 = one of the ids) and 3 connections key-share lock them in short transactions, each
 * statement of theirs one row (so they cannot deadlock among themselves). Returns the errors any of
 * them saw (PostgreSQL may pick any member of a deadlock as its victim).
 */
async function underContention(
  ids: string[],
  plainSql: string,
  workers: number,
  each: number,
  work: (worker: number, n: number) => Promise<unknown>,
): Promise<string[]> {
  let running = true;
  const errors: string[] = [];
  const pause = () => new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
  const anyId = () => ids[Math.floor(Math.random() * ids.length)];
  const lockers = Array.from({ length: 3 }, async () => {
    while (running) {
      const client = await t.db.pool.connect();
      try {
        await client.query("BEGIN");
        await client.query("SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR KEY SHARE", [anyId()]);
        await pause();
        await client.query("COMMIT");
      } catch (error) {
        errors.push(`key-share locker: ${describeError(error)}`);
        await client.query("ROLLBACK").catch(() => {});
      } finally {
        client.release();
      }
    }
  });
  const writers = Array.from({ length: 2 }, async () => {
    while (running) {
      await t.db.pool.query(plainSql, [anyId()]).catch((error: unknown) => {
        errors.push(`plain writer: ${describeError(error)}`);
      });
      await pause();
    }
  });
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      for (let n = 0; n < each; n++) {
        try {
          await work(worker, n);
        } catch (error) {
          errors.push(`worker: ${describeError(error)}`);
        }
      }
    }),
  );
  running = false;
  await Promise.all([...lockers, ...writers]);
  return errors;
}

async function arrange(count: number) {
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, "https://example.com/hook", "secret");
  return Promise.all(Array.from({ length: count }, () => seedDelivery(t.db, bot.id)));
}

/** Claims `id` and, when it got the claim, records the attempt (alternately failed and delivered). */
async function claimAndRecord(
  store: Pick<DeliveryStore, "claim" | "record">,
  id: string,
  botId: string,
  n: number,
) {
  const claim = await store.claim(id, options());
  if (claim.kind !== "claimed") return claim.kind;
  const now = new Date();
  const recorded = await store.record({
    deliveryId: id,
    botId,
    attemptNumber: claim.attemptNumber,
    leaseUntil: claim.leaseUntil,
    attemptedAt: now,
    outcome: n % 2 === 0 ? fail : ok,
    now,
    retryDelays: NO_DELAYS,
  });
  return `claimed, ${recorded.kind}`;
}

describe("concurrent claims of one delivery while other writers rewrite it and attempts key-share lock it", () => {
  it("when 6 connections claim and record one delivery 300 times each, then no statement deadlocks and attempts are claimed and recorded", async () => {
    const [delivery] = await arrange(1);
    const { id, botId } = delivery!;
    const outcomes: string[] = [];
    const single = {
      claim: (deliveryId: string, claimOptions: ClaimOptions) => claimAttempt(t.db, deliveryId, claimOptions),
      record: recordAttempt.bind(null, t.db),
    };
    const errors = await underContention([id], RESET_SQL, 6, 300, async (_, n) => {
      outcomes.push(await claimAndRecord(single, id, botId, n));
    });
    expect(errors).toEqual([]);
    // The claims did reach the UPDATE (the statement that could deadlock), and records were kept.
    expect(outcomes.filter((o) => o.startsWith("claimed")).length).toBeGreaterThan(20);
    expect(outcomes).toContain("claimed, retry");
    const { rows } = await t.db.pool.query(
      "SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = $1",
      [id],
    );
    expect(rows[0].n).toBeGreaterThan(0);
  }, 120_000);

  it("when 8 callers claim and record 4 deliveries through batched statements 150 times each, then no statement deadlocks and attempts are claimed", async () => {
    const deliveries = await arrange(4);
    const store = createDeliveryStore(t.db, { maxBatch: 8, maxInFlight: 2 });
    const outcomes: string[] = [];
    const errors = await underContention(
      deliveries.map((d) => d.id),
      RESET_SQL,
      8,
      150,
      async (worker, n) => {
        const delivery = deliveries[(worker + n) % deliveries.length]!;
        outcomes.push(await claimAndRecord(store, delivery.id, delivery.botId, n));
      },
    );
    expect(errors).toEqual([]);
    expect(outcomes.filter((o) => o.startsWith("claimed")).length).toBeGreaterThan(20);
  }, 120_000);

  it("when 6 connections redeliver one delivery 300 times each while others finish it, then no statement deadlocks and series are started", async () => {
    const [delivery] = await arrange(1);
    const { id, botId } = delivery!;
    const kinds: string[] = [];
    const errors = await underContention(
      [id],
      "UPDATE webhook_deliveries SET state = 'delivered', completed_at = now() WHERE id = $1",
      6,
      300,
      async () => {
        kinds.push((await redeliver(t.db, botId, id, new Date())).kind);
      },
    );
    expect(errors).toEqual([]);
    expect(kinds.filter((k) => k === "redelivered").length).toBeGreaterThan(20);
  }, 120_000);
});
