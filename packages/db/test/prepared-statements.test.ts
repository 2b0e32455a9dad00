/**
 * Named prepared statements and a transaction-pooling PgBouncer (docs/scaling.md): through a real
 * PgBouncer in transaction mode, the apps' named statements fail (the pooler hands each
 * transaction another server connection) unless they are sent unnamed.
 */

import { type PrivatePgBouncer, startPgBouncer } from "@botdir/test-stores";
import { createDb, type Db, type PreparedStatements } from "../src/client.js";
import { baseDatabaseUrl, createTestDatabase, type TestDatabase } from "../src/testing.js";

let t: TestDatabase;
let bouncer: PrivatePgBouncer;
const opened: Db[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  // Two server connections for eight clients: named statements land on connections that never
  // parsed them, as they do in production with many replicas.
  bouncer = await startPgBouncer({ targetUrl: baseDatabaseUrl(), poolSize: 2 });
});

afterAll(async () => {
  await Promise.all(opened.map((db) => db.close()));
  await bouncer?.stop();
  await t?.drop();
});

function open(options: { url: string; directUrl?: string; preparedStatements: PreparedStatements }) {
  const offs: string[] = [];
  // A connect timeout well above production's 500 ms, as createTestDatabase's: a loaded test
  // machine must not turn a slow connect into a failure these tests would misread.
  const db = createDb({
    ...options,
    poolMax: 8,
    connectionTimeoutMs: 10_000,
    onPreparedStatementsOff: (reason) => offs.push(reason),
  });
  opened.push(db);
  return { db, offs };
}

/** 200 concurrent statements under five names, each its own transaction; the failures' codes. */
async function namedLoad(db: Db): Promise<string[]> {
  const results = await Promise.allSettled(
    Array.from({ length: 200 }, (_, i) =>
      db.pool.query({ name: `probe_${i % 5}`, text: `SELECT $1::int + ${i % 5} AS n`, values: [i] }),
    ),
  );
  return results.flatMap((r) =>
    r.status === "rejected" ? [String((r.reason as { code?: string }).code)] : [],
  );
}

describe("named prepared statements behind PgBouncer 1.18 in transaction mode", () => {
  it("when names are forced on through the pooler, then statements fail with 26000 or 42P05 (the failure the other modes avoid)", async () => {
    const { db } = open({ url: bouncer.url(t.name), preparedStatements: "on" });
    const failures = await namedLoad(db);
    expect(failures.length).toBeGreaterThan(0);
    expect(new Set(failures)).toEqual(
      new Set(failures.filter((code) => code === "26000" || code === "42P05")),
    );
  });

  it("when DATABASE_DIRECT_URL differs from DATABASE_URL (auto), then statements go unnamed from the start and every one succeeds", async () => {
    const { db, offs } = open({ url: bouncer.url(t.name), directUrl: t.url, preparedStatements: "auto" });
    expect(db.namedStatements()).toBe(false);
    expect(await namedLoad(db)).toEqual([]);
    expect(offs).toEqual([]);
  });

  it("when nothing declares the pooler (auto, one URL), then the first name error turns names off, the statements that hit it are sent again unnamed, and every one succeeds", async () => {
    const { db, offs } = open({ url: bouncer.url(t.name), preparedStatements: "auto" });
    expect(db.namedStatements()).toBe(true);
    expect(await namedLoad(db)).toEqual([]);
    expect(db.namedStatements()).toBe(false);
    expect(offs).toHaveLength(1);
    expect(offs[0]).toMatch(/transaction pooler/);
  });

  it("when statements are unnamed, then Prisma's queries and interactive transactions work through the pooler too", async () => {
    const { db } = open({ url: bouncer.url(t.name), directUrl: t.url, preparedStatements: "auto" });
    const counts = await Promise.all(
      Array.from({ length: 20 }, () =>
        db.prisma.$transaction(async (tx) => {
          const before = await tx.bot.count();
          await tx.$executeRawUnsafe("SELECT pg_sleep(0.005)");
          return before;
        }),
      ),
    );
    expect(counts).toEqual(counts.map(() => 0));
  });
});

describe("DB_PREPARED_STATEMENTS on a direct connection", () => {
  async function preparedOnServer(mode: PreparedStatements): Promise<number> {
    const db = createDb({ url: t.url, preparedStatements: mode, poolMax: 1, connectionTimeoutMs: 10_000 });
    opened.push(db);
    await db.pool.query({ name: "probe_direct", text: "SELECT 1 AS one" });
    const { rows } = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = 'probe_direct'",
    );
    return rows[0]?.n ?? -1;
  }

  it("when on (or auto with one URL), then the statement is prepared on the server under its name", async () => {
    expect(await preparedOnServer("on")).toBe(1);
    expect(await preparedOnServer("auto")).toBe(1);
  });

  it("when off, then no statement is prepared under a name", async () => {
    expect(await preparedOnServer("off")).toBe(0);
  });
});
