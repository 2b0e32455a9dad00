import { createTestDatabase, type TestDatabase, testRedisUrl } from "@botdir/db/testing";
import { Redis } from "ioredis";
import request from "supertest";
import { ingestApp } from "./support/votes.js";

let t: TestDatabase;
let redis: Redis;

beforeAll(async () => {
  t = await createTestDatabase();
  redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
});

afterAll(async () => {
  redis.disconnect();
  await t.drop();
});

describe("vote-ingest GET /health", () => {
  it("when PostgreSQL and Redis answer, then 200 ok", async () => {
    const app = ingestApp({ db: t.db, redis });
    const res = await request(app).get("/health");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok", checks: { postgres: "ok", redis: "ok" } });
  });

  it("when PostgreSQL is unreachable, then 503 naming PostgreSQL", async () => {
    const { createDb } = await import("@botdir/db");
    const deadDb = createDb({ url: "postgresql://postgres@127.0.0.1:1/none", connectionTimeoutMs: 200 });
    const app = ingestApp({ db: deadDb, redis });
    const res = await request(app).get("/health");
    expect(res.status).toBe(503);
    expect(res.body.error).toBe("PostgreSQL is unreachable.");
    expect(res.body.checks).toEqual({ postgres: "down", redis: "ok" });
    await deadDb.close();
  });
});
