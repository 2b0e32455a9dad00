/**
 * A token generated on the edit page (vote-ingest's internal endpoint) works on the public API,
 * and once a new one is generated the old one is refused on the very next request: the API looks
 * the token's hash up on every request, with nothing cached in between.
 */
import { randomBytes } from "node:crypto";
import type { RequestListener } from "node:http";
import { createSecretBox } from "@botdir/db";
import { randomBotId } from "@botdir/db/testing";
import type { RedisClient } from "@botdir/service-kit";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import request from "supertest";
import { createApp as createApiApp } from "../../apps/api/src/app.js";
import { createApp as createIngestApp } from "../../apps/vote-ingest/src/app.js";
import { startStores, type TestStores } from "../src/stack.js";

const KEY = randomBytes(24).toString("base64url");
let t: TestStores;
let redis: RedisClient;
let api: RequestListener;
let ingest: Express;

beforeAll(async () => {
  t = await startStores();
  redis = t.redis;
  const clock = new ManualClock(new Date("2026-11-21T05:00:00.000Z"));
  api = createApiApp({ db: t.db, redis, clock, logger: silentLogger, redisPrefix: t.prefix });
  ingest = createIngestApp({
    db: t.db,
    redis,
    clock,
    logger: silentLogger,
    internalApiKey: KEY,
    secretBox: createSecretBox(randomBytes(32)),
    webhookResolver: null,
  });
});

afterAll(async () => {
  await t?.close();
});

const rotate = async (id: string): Promise<string> => {
  const res = await request(ingest).post(`/internal/v1/bots/${id}/token`).set("Authorization", KEY);
  expect(res.status).toBe(200);
  return res.body.token as string;
};
const readVotes = (id: string, token: string) =>
  request(api).get(`/api/v1/bots/${id}/votes`).set("Authorization", token);

describe("token rotation across vote-ingest and the API", () => {
  it("when a new token is generated, then the old one gets 401 on the very next request and the new one works", async () => {
    const id = randomBotId();
    const created = await request(ingest)
      .post("/internal/v1/bots")
      .set("Authorization", KEY)
      .send({ id, approve: true });
    expect(created.status).toBe(201);

    const first = await rotate(id);
    expect((await readVotes(id, first)).status).toBe(200);
    expect((await readVotes(id, `Bearer ${first}`)).status).toBe(200);

    const second = await rotate(id);
    const old = await readVotes(id, first);
    expect(old.status).toBe(401);
    expect(old.body).toEqual({ error: "Invalid token." });
    expect((await readVotes(id, `Bearer ${first}`)).status).toBe(401);

    const fresh = await readVotes(id, second);
    expect(fresh.status).toBe(200);
    expect(fresh.body).toEqual({ votes: [] });
  });
});
