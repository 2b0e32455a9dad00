/**
 * Delivery ids are version 7 UUIDs: the creation time in their first 48 bits, so the ids of newer
 * deliveries sort after older ones (in PostgreSQL's uuid order too) and index writes keyed by them
 * land on the newest pages.
 */
import { deliveryTraceId, deliveryTraceparent, isDeliveryId, newDeliveryId } from "../src/deliveries.js";
import { useTestDatabase } from "../src/testing.js";

const t = useTestDatabase({ poolMax: 2 });

describe("newDeliveryId", () => {
  it("when an id is made, then it is a version 7 RFC 9562 UUID carrying the time in Unix milliseconds", () => {
    const at = Date.UTC(2026, 10, 25, 19, 30, 0, 123);
    const id = newDeliveryId(at);

    expect(isDeliveryId(id)).toBe(true);
    expect(id[14]).toBe("7");
    expect("89ab").toContain(id[19]);
    expect(Number.parseInt(id.replace(/-/g, "").slice(0, 12), 16)).toBe(at);
  });

  it("when many ids are made in one millisecond, then they all differ", () => {
    const at = Date.now();
    const ids = new Set(Array.from({ length: 10_000 }, () => newDeliveryId(at)));
    expect(ids.size).toBe(10_000);
  });

  it("when ids are made at increasing times, then PostgreSQL orders them as they were made", async () => {
    const start = Date.UTC(2026, 0, 1);
    const made = Array.from({ length: 200 }, (_, i) => newDeliveryId(start + i * 37));
    const shuffled = [...made].sort(() => Math.random() - 0.5);

    const { rows } = await t.db.pool.query<{ id: string }>(
      "SELECT id::text FROM unnest($1::uuid[]) AS u(id) ORDER BY id",
      [shuffled],
    );

    expect(rows.map((r) => r.id)).toEqual(made);
  });
});

describe("deliveryTraceparent", () => {
  // PostgreSQL's record statement reads the id the same way: e2e/test/tracing.test.ts, "trace ids
  // with tracing off", checks the attempts it writes.
  it("when a delivery's row keeps no context, then its trace is the one its id names, as a valid W3C traceparent, not sampled", () => {
    const id = newDeliveryId(Date.UTC(2026, 10, 27, 21, 0, 0, 5)).toUpperCase();
    const traceparent = deliveryTraceparent(id);
    const hex = id.replaceAll("-", "").toLowerCase();

    expect(traceparent).toBe(`00-${hex}-${hex.slice(16)}-00`);
    expect(traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    expect(hex.slice(16)).not.toBe("0000000000000000");
    expect(deliveryTraceId(id)).toBe(hex);
  });
});
