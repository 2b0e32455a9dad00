/**
 * A vote cast on vote-ingest is what the public API reports: /check and /votes give the same
 * instant, to the millisecond, and the window reopens after 12 hours on the same clock.
 */

import type { RequestListener } from "node:http";
import { randomUserId, seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import request from "supertest";
import { createDeliveryQueue, type DeliveryQueue } from "../../apps/vote-ingest/src/outbox/queue.js";
import { apiOn, ingestOn } from "../src/in-process.js";
import { useStores } from "../src/stack.js";

const KEY = "e2e-internal-key-0123456789abcdef";

const t = useStores();
let queue: DeliveryQueue;
let clock: ManualClock;
let ingest: Express;
let api: RequestListener;

beforeAll(() => {
  clock = new ManualClock("2026-11-21T09:15:30.789Z");
  // Hash-tagged, as QUEUE_PREFIX must be: BullMQ's scripts touch several keys (one slot on a Cluster).
  queue = createDeliveryQueue({
    db: t.db,
    redis: t.redis,
    prefix: `{${t.prefix}bull}`,
    logger: silentLogger,
  });
  ingest = ingestOn(t, { clock, internalApiKey: KEY, deliveryQueue: queue });
  api = apiOn(t, { clock });
  t.beforeClose(async () => {
    await queue.queue.obliterate({ force: true });
    await queue.close();
  });
});

const cast = (botId: string, userId: string) =>
  request(ingest)
    .post("/internal/v1/votes")
    .set("Authorization", KEY)
    .send({ bot_id: botId, user_id: userId });

describe("vote cast on vote-ingest, read through the API", () => {
  it("when a vote is cast, then /check reports the window and /votes the log entry with the same votedAt", async () => {
    const bot = await seedBot(t.db);
    const auth = { Authorization: bot.token ?? "" };
    const userId = randomUserId();

    const cast201 = await cast(bot.id, userId);
    const check = await request(api).get(`/api/v1/bots/${bot.id}/check`).query({ userId }).set(auth);
    const votes = await request(api).get(`/api/v1/bots/${bot.id}/votes`).set(auth);

    expect(cast201.status).toBe(201);
    expect(check.status).toBe(200);
    expect(check.body).toEqual({
      voted: 1,
      hasVoted: true,
      votedAt: cast201.body.vote.voted_at,
      nextVoteAt: cast201.body.nextVoteAt,
    });
    expect(check.body.votedAt).toBe("2026-11-21T09:15:30.789Z");
    expect(votes.status).toBe(200);
    expect(votes.body.votes).toEqual([{ user_id: userId, voted_at: "2026-11-21T09:15:30.789Z" }]);
  });

  it("when 12 hours pass on the shared clock, then /check reports outside the window and a new vote is accepted", async () => {
    const bot = await seedBot(t.db);
    const auth = { Authorization: bot.token ?? "" };
    const userId = randomUserId();
    const first = await cast(bot.id, userId);

    clock.set(first.body.nextVoteAt);
    const check = await request(api).get(`/api/v1/bots/${bot.id}/check`).query({ userId }).set(auth);
    const again = await cast(bot.id, userId);

    expect(check.body).toEqual({ voted: 0, hasVoted: false, votedAt: null, nextVoteAt: null });
    expect(again.status).toBe(201);
    expect(again.body.vote.voted_at).toBe(first.body.nextVoteAt);
  });
});
