import { createTestDatabase, type TestDatabase, testRedisUrl } from "@botdir/db/testing";
import { silentLogger } from "@botdir/service-kit/testing";
import { Redis } from "ioredis";
import request from "supertest";
import { createHttpApp } from "../src/app.js";

let t: TestDatabase;
let redis: Redis;

beforeAll(async () => {
  t = await createTestDatabase();
  redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: null });
});

afterAll(async () => {
  redis.disconnect();
  await t.drop();
});

describe("webhook-dispatcher GET /health", () => {
  it("when PostgreSQL and Redis answer, then 200 ok", async () => {
    const res = await request(createHttpApp({ db: t.db, redis, logger: silentLogger })).get("/health");
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("ok");
  });

  it("answers unknown paths with a JSON 404", async () => {
    const res = await request(createHttpApp({ db: t.db, redis, logger: silentLogger })).get("/metrics-nope");
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "No such endpoint." });
  });
});
