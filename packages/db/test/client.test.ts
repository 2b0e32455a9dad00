import { createDb, type Db } from "../src/client.js";
import { createTestDatabase, type TestDatabase } from "../src/testing.js";

let t: TestDatabase;
let db: Db;

beforeAll(async () => {
  t = await createTestDatabase();
  db = createDb({ url: t.url, poolMax: 2 });
});

afterAll(async () => {
  await db.close();
  await t.drop();
});

describe("the pool when PostgreSQL drops a connection", () => {
  it("when a checked-out client's backend is terminated between two queries, then no error event escapes, its next query fails, and the pool serves again", async () => {
    const escaped: unknown[] = [];
    const onUncaught = (error: unknown) => escaped.push(error);
    process.on("uncaughtException", onUncaught);
    try {
      const client = await db.pool.connect();
      const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      // Terminated from another connection while this client holds no query (as the outbox relay
      // does while it waits for Redis): pg emits 'error' on the client itself.
      await t.db.pool.query("SELECT pg_terminate_backend($1)", [rows[0]?.pid]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await expect(client.query("SELECT 1")).rejects.toThrow();
      client.release();
      expect(escaped).toEqual([]);
      expect((await db.pool.query<{ one: number }>("SELECT 1 AS one")).rows[0]?.one).toBe(1);
    } finally {
      process.off("uncaughtException", onUncaught);
    }
  });

  it("defaults the pool's connect timeout to 500 ms", () => {
    expect(
      (db.pool as unknown as { options: { connectionTimeoutMillis: number } }).options
        .connectionTimeoutMillis,
    ).toBe(500);
  });
});
