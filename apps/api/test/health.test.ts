import { createTestDatabase, type TestDatabase } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import { Redis } from "ioredis";
import request from "supertest";
import { createApp } from "../src/app.js";
import { failFastRedis } from "./support.js";

let t: TestDatabase;
let redis: Redis;

beforeAll(async () => {
  t = await createTestDatabase();
  redis = await failFastRedis();
});

afterAll(async () => {
  redis.disconnect();
  await t.drop();
});

describe("GET /api/health", () => {
  it("when PostgreSQL and Redis answer, then 200 ok without a credential", async () => {
    const app = createApp({ db: t.db, redis, clock: new ManualClock(), logger: silentLogger });
    const res = await request(app).get("/api/health");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok", checks: { postgres: "ok", redis: "ok" } });
  });

  it("when Redis is unreachable, then 503 naming Redis", async () => {
    const deadRedis = new Redis("redis://127.0.0.1:1", {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      lazyConnect: true,
      retryStrategy: () => null,
    });
    deadRedis.on("error", () => {});
    const app = createApp({ db: t.db, redis: deadRedis, clock: new ManualClock(), logger: silentLogger });
    const res = await request(app).get("/api/health");
    expect(res.status).toBe(503);
    expect(res.body).toEqual({
      status: "unavailable",
      checks: { postgres: "ok", redis: "down" },
      error: "Redis is unreachable.",
    });
    deadRedis.disconnect();
  });

  it("answers unknown routes with a JSON 404", async () => {
    const app = createApp({ db: t.db, redis, clock: new ManualClock(), logger: silentLogger });
    const res = await request(app).get("/nope");
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "No such endpoint." });
  });
});
