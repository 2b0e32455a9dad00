/**
 * Which series an attempt row belongs to (manual redelivery starts a new one). The dispatcher's
 * record statements write the series of the delivery row they hold locked, so the per-row trigger
 * (a plpgsql call and a SELECT per attempt, a third of the statement's cost) no longer runs for
 * them; an insert that leaves the column out still gets its delivery's series from that trigger.
 * The attempt's bot is written the same way, from the locked delivery row (the column has no
 * foreign key of its own; the delivery's keeps the bot).
 */
import { seedBot, useTestDatabase } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { claimAttempt, recordAttempt, STATEMENTS } from "../src/deliveries.js";
import { attemptRows, claimOptions, configureWebhook, DELAYS, ok, seedDelivery } from "./support.js";

const t = useTestDatabase();

/** A pending delivery in `series`, its next attempt claimed. */
async function claimedInSeries(series: number, clock: ManualClock) {
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, "https://example.com/hook", "whsec_series");
  const delivery = await seedDelivery(t.db, bot.id, { votedAt: clock.now() });
  await t.db.pool.query("UPDATE webhook_deliveries SET series = $2 WHERE id = $1", [delivery.id, series]);
  const claim = await claimAttempt(t.db, delivery.id, claimOptions(clock));
  if (claim.kind !== "claimed") throw new Error(`expected a claim, got ${claim.kind}`);
  return { delivery, claim };
}

/** Records the claimed attempt as a 2xx answer, naming `botId` as its bot. */
function recordOk(
  deliveryId: string,
  botId: string,
  claim: Awaited<ReturnType<typeof claimedInSeries>>["claim"],
  clock: ManualClock,
) {
  return recordAttempt(t.db, {
    deliveryId,
    botId,
    attemptNumber: claim.attemptNumber,
    leaseUntil: claim.leaseUntil,
    attemptedAt: clock.now(),
    outcome: ok,
    now: clock.now(),
    retryDelays: DELAYS,
  });
}

interface PlanWithTriggers {
  Triggers?: { "Trigger Name": string; Calls: number }[];
}

describe("attempt series", () => {
  it("when the dispatcher records an attempt of a redelivered delivery, then the row has the delivery's series", async () => {
    const clock = new ManualClock(new Date("2026-11-23T08:00:00Z"));
    const { delivery, claim } = await claimedInSeries(3, clock);

    const result = await recordOk(delivery.id, delivery.botId, claim, clock);

    expect(result).toEqual({ kind: "delivered" });
    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => [a.series, a.attemptNumber])).toEqual([[3, 1]]);
  });

  it("when the record statement is given another bot's id, then the attempt row has the delivery's bot", async () => {
    const clock = new ManualClock(new Date("2026-11-23T08:02:00Z"));
    const { delivery, claim } = await claimedInSeries(0, clock);
    const other = await seedBot(t.db);

    const result = await recordOk(delivery.id, other.id, claim, clock);

    expect(result).toEqual({ kind: "delivered" });
    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => a.botId)).toEqual([delivery.botId]);
    expect(other.id).not.toBe(delivery.botId);
  });

  it("when the batched record statement runs, then it writes the series itself and the per-row trigger does not fire", async () => {
    const clock = new ManualClock(new Date("2026-11-23T08:05:00Z"));
    const claimed = [await claimedInSeries(2, clock), await claimedInSeries(0, clock)];
    const now = clock.now().toISOString();
    const each = <T>(value: T) => claimed.map(() => value);
    const client = await t.db.pool.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query<{ "QUERY PLAN": PlanWithTriggers[] }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) ${STATEMENTS.RECORD_BATCH_SQL}`,
        [
          claimed.map((c) => c.delivery.id),
          claimed.map((c) => c.claim.attemptNumber),
          claimed.map((c) => c.claim.leaseUntil.toISOString()),
          each("delivered"),
          each(null),
          each(now),
          each(now),
          claimed.map((c) => c.delivery.botId),
          each(204),
          each(null),
          each(5),
          each(now),
        ],
      );
      const triggers = (rows[0]?.["QUERY PLAN"][0]?.Triggers ?? []).map((tr) => tr["Trigger Name"]);
      expect(triggers).not.toContain("webhook_attempts_set_series");
      const written = await client.query<{ delivery_id: string; series: number }>(
        "SELECT delivery_id, series FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[])",
        [claimed.map((c) => c.delivery.id)],
      );
      const byDelivery = new Map(written.rows.map((r) => [r.delivery_id, r.series]));
      expect(claimed.map((c) => byDelivery.get(c.delivery.id))).toEqual([2, 0]);
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
  });

  it("when an insert leaves the series out, then the trigger gives the row its delivery's series", async () => {
    const clock = new ManualClock(new Date("2026-11-23T08:10:00Z"));
    const { delivery } = await claimedInSeries(5, clock);

    await t.db.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, bot_id, attempt_number, status_code, error_kind, duration_ms, attempted_at)
       VALUES ($1, $2, 1, NULL, 'interrupted', 0, $3)`,
      [delivery.id, delivery.botId, clock.now()],
    );

    const attempts = await attemptRows(t.db, delivery.id);
    expect(attempts.map((a) => [a.series, a.errorKind])).toEqual([[5, "interrupted"]]);
  });
});
