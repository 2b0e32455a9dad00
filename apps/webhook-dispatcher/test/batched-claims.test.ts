/**
 * Claims and records of concurrent attempts sharing statements (createDeliveryStore with batching):
 * the same outcomes as one statement per attempt, rows locked elsewhere handled one by one, and
 * never two claims of one delivery in one statement.
 */
import type { Db } from "@botdir/db";
import { seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { waitFor } from "@botdir/service-kit/testing";
import { type ClaimResult, createDeliveryStore } from "../src/deliveries.js";
import { claimOptions, DELAYS, fail, LEASE_MS, ok, recordInput, useDeliveryDatabase } from "./support.js";

const t = useDeliveryDatabase();

/** The database with every statement's name (or "sql") logged. */
function counted(db: Db): { db: Db; names: string[] } {
  const names: string[] = [];
  const pool = {
    query: (config: string | { name?: string }, values?: unknown[]) => {
      names.push(typeof config === "string" ? "sql" : (config.name ?? "sql"));
      return (db.pool.query as (c: unknown, v?: unknown[]) => Promise<unknown>)(config, values);
    },
    connect: () => db.pool.connect(),
  };
  return { db: { ...db, pool: pool as unknown as Db["pool"] }, names };
}

async function deliveries(clock: ManualClock, n: number) {
  const { newDelivery } = await t.webhookBot("http://127.0.0.1:9/hook", { secret: "secret", clock });
  return Promise.all(Array.from({ length: n }, () => newDelivery()));
}

function claimed(result: ClaimResult) {
  if (result.kind !== "claimed") throw new Error(`expected a claim, got ${result.kind}`);
  return result;
}

describe("batched claims and records", () => {
  it("when twenty attempts are claimed and recorded at once, then each takes one statement for all and the outcomes are those of one statement each", async () => {
    const clock = new ManualClock();
    const all = await deliveries(clock, 20);
    // The last one has four failed attempts behind it: its fifth ends the delivery.
    const last = all[19]!;
    await t.db.prisma.delivery.update({ where: { id: last.id }, data: { attemptsMade: 4 } });
    const { db, names } = counted(t.db);
    const store = createDeliveryStore(db, { maxBatch: 50, maxInFlight: 1 });

    const claims = (await Promise.all(all.map((d) => store.claim(d.id, claimOptions(clock))))).map(claimed);

    expect(names).toEqual(["dispatcher_claim_batch"]);
    expect(claims.map((c) => c.attemptNumber)).toEqual([...Array(19).fill(1), 5]);
    expect(claims.map((c) => c.target.deliveryId)).toEqual(all.map((d) => d.id));
    expect(claims.every((c) => c.target.secret === "secret")).toBe(true);
    expect(claims[0]!.target.userId).toBe(all[0]!.userId);

    clock.advance(1_000);
    const outcome = (i: number) => (i < 10 ? ok : fail);
    const results = await Promise.all(
      claims.map((claim, i) => {
        // Numbers 15..18 lost their claim (another replica took over): nothing may be recorded.
        const held = i >= 15 && i < 19 ? { ...claim, leaseUntil: new Date(0) } : claim;
        return store.record(recordInput(all[i]!, held, outcome(i), clock));
      }),
    );

    expect(names).toEqual(["dispatcher_claim_batch", "dispatcher_record_batch"]);
    const retryAt = new Date(clock.now().getTime() + DELAYS[0]!);
    expect(results).toEqual([
      ...Array(10).fill({ kind: "delivered" }),
      ...Array(5).fill({ kind: "retry", nextAttemptAt: retryAt }),
      ...Array(4).fill({ kind: "superseded" }),
      { kind: "failed" },
    ]);
    const rows = await Promise.all(all.map((d) => t.row(d.id)));
    expect(rows.map((r) => r.state)).toEqual([
      ...Array(10).fill("delivered"),
      ...Array(9).fill("pending"),
      "failed",
    ]);
    expect(rows[0]!.completedAt).toEqual(clock.now());
    expect(rows[10]!.nextAttemptAt).toEqual(retryAt);
    expect(rows[10]!.leaseUntil).toBeNull();
    expect(rows[15]!.leaseUntil).not.toBeNull(); // superseded: the row is left to its new owner
    const attempts = await Promise.all(all.map((d) => t.attempts(d.id)));
    expect(attempts.map((a) => a.length)).toEqual([...Array(15).fill(1), 0, 0, 0, 0, 1]);
    expect(attempts[0]![0]).toMatchObject({
      attemptNumber: 1,
      statusCode: 204,
      errorKind: null,
      durationMs: 12,
    });
    expect(attempts[10]![0]).toMatchObject({ attemptNumber: 1, statusCode: 500, errorKind: "http_status" });
    expect(attempts[19]![0]).toMatchObject({ attemptNumber: 5, statusCode: 500 });
  });

  it("when a row is locked by another transaction, then the batch skips it, claims the others at once, and that one is claimed when the lock goes", async () => {
    const clock = new ManualClock();
    const all = await deliveries(clock, 3);
    const locked = all[2]!;
    const store = createDeliveryStore(t.db, { maxBatch: 50, maxInFlight: 1 });
    const holder = await t.db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE", [locked.id]);
      const holderPid = (await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;

      let lockedDone = false;
      const lockedClaim = store.claim(locked.id, claimOptions(clock)).finally(() => {
        lockedDone = true;
      });
      const others = await Promise.all(all.slice(0, 2).map((d) => store.claim(d.id, claimOptions(clock))));
      expect(others.map((c) => c.kind)).toEqual(["claimed", "claimed"]);
      // The locked claim has reached PostgreSQL and waits there on the holder's lock: from here on
      // it cannot finish before COMMIT unless it stopped waiting.
      await waitFor(async () => {
        const { rows } = await t.db.pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
          [holderPid],
        );
        return rows[0]!.n === 1;
      }, "the locked claim to wait on the row lock");
      expect(lockedDone).toBe(false);

      await holder.query("COMMIT");
      expect(claimed(await lockedClaim).attemptNumber).toBe(1);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
    }
  });

  it("when one delivery is claimed twice at once, then the claims go in separate statements: one is claimed, the other waits for its lease", async () => {
    const clock = new ManualClock();
    const [delivery, other] = await deliveries(clock, 2);
    const { db, names } = counted(t.db);
    const store = createDeliveryStore(db, { maxBatch: 50, maxInFlight: 1 });

    const [a, b, c] = await Promise.all([
      store.claim(delivery!.id, claimOptions(clock)),
      store.claim(other!.id, claimOptions(clock)),
      store.claim(delivery!.id, claimOptions(clock)),
    ]);

    expect(names).toEqual(["dispatcher_claim_batch", "dispatcher_claim"]);
    const first = claimed(a!);
    expect(b!.kind).toBe("claimed");
    expect(c).toEqual({ kind: "busy", until: first.leaseUntil });
    expect((await t.row(delivery!.id)).attemptsMade).toBe(1);
  });

  it("when a batch meets the rare cases (an expired lease, no webhook, not due, already delivered), then each ends as with one statement", async () => {
    const clock = new ManualClock();
    const [crashed, early, done, fine] = await deliveries(clock, 4);
    const store = createDeliveryStore(t.db, { maxBatch: 50, maxInFlight: 1 });
    const started = clock.now();
    claimed(await store.claim(crashed!.id, claimOptions(clock))); // then the process "dies"
    clock.advance(LEASE_MS + 1);
    const bot2 = await seedBot(t.db);
    const orphan = await t.seedDelivery(bot2.id, { votedAt: clock.now() }); // bot without webhook
    const later = new Date(clock.now().getTime() + 60_000);
    await t.db.prisma.delivery.update({ where: { id: early!.id }, data: { nextAttemptAt: later } });
    await t.db.prisma.delivery.update({ where: { id: done!.id }, data: { state: "delivered" } });

    const results = await Promise.all(
      [crashed!, orphan, early!, done!, fine!].map((d) => store.claim(d.id, claimOptions(clock))),
    );

    expect(results[0]).toEqual({ kind: "early", at: new Date(clock.now().getTime() + DELAYS[0]!) });
    expect(results[1]).toEqual({ kind: "done", reason: "no_webhook" });
    expect(results[2]).toEqual({ kind: "early", at: later });
    expect(results[3]).toEqual({ kind: "done", reason: "delivered" });
    expect(claimed(results[4]!).attemptNumber).toBe(1);
    const interrupted = await t.attempts(crashed!.id);
    expect(interrupted.map((a) => [a.attemptNumber, a.errorKind, a.attemptedAt])).toEqual([
      [1, "interrupted", started],
    ]);
    expect((await t.row(orphan.id)).state).toBe("failed");
  });
});
