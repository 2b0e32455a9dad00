import { isRetryableConflict } from "../src/errors.js";
import { useTestDatabase } from "../src/testing.js";

const t = useTestDatabase({ poolMax: 4 });

beforeAll(async () => {
  await t.db.pool.query("CREATE TABLE conflict_probe (id int PRIMARY KEY, n int NOT NULL)");
  await t.db.pool.query("INSERT INTO conflict_probe VALUES (1, 0), (2, 0)");
});

describe("isRetryableConflict", () => {
  it("when PostgreSQL picks a transaction as a deadlock victim, then its error is retryable; a refused row is not", async () => {
    const [a, b] = await Promise.all([t.db.pool.connect(), t.db.pool.connect()]);
    try {
      for (const client of [a, b]) {
        await client.query("BEGIN");
        await client.query("SET LOCAL deadlock_timeout = '50ms'");
      }
      await a.query("UPDATE conflict_probe SET n = n + 1 WHERE id = 1");
      await b.query("UPDATE conflict_probe SET n = n + 1 WHERE id = 2");
      // Each now waits for the row the other holds: PostgreSQL aborts one of them.
      const outcomes = await Promise.allSettled([
        a.query("UPDATE conflict_probe SET n = n + 1 WHERE id = 2"),
        b.query("UPDATE conflict_probe SET n = n + 1 WHERE id = 1"),
      ]);
      const failures = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
      expect(failures).toHaveLength(1);
      const victim = (failures[0] as PromiseRejectedResult).reason as { code?: string };
      expect(victim.code).toBe("40P01");
      expect(isRetryableConflict(victim)).toBe(true);
    } finally {
      await a.query("ROLLBACK").catch(() => {});
      await b.query("ROLLBACK").catch(() => {});
      a.release();
      b.release();
    }

    const duplicate = await t.db.pool
      .query("INSERT INTO conflict_probe VALUES (1, 0)")
      .catch((e: unknown) => e);
    expect((duplicate as { code?: string }).code).toBe("23505");
    expect(isRetryableConflict(duplicate)).toBe(false);
    expect(isRetryableConflict(new Error("connection terminated"))).toBe(false);
    expect(isRetryableConflict(null)).toBe(false);
  });
});
