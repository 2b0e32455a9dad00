/**
 * Fault: vote-ingest dies (SIGKILL) after a vote's transaction committed and before its delivery
 * was handed to the queue. The window is hit deterministically: the first vote-ingest runs with a
 * REDIS_URL where nothing listens, so its after-commit hand-off cannot happen (nor can its relay's),
 * and it is killed right after the 201. The outbox relay of the restarted vote-ingest, now with
 * Redis, hands the delivery off and the dispatcher delivers it.
 */
import { randomUserId } from "@botdir/db/testing";
import { DEFAULT_QUEUE_PREFIX, QUEUES } from "@botdir/schema";
import { Redis } from "ioredis";
import { freePort, waitFor } from "../../src/processes.js";
import { castVote, useStack } from "../../src/stack.js";

const stack = useStack({
  privateRedis: true,
  replicas: { api: 0, "vote-ingest": 0, "webhook-dispatcher": 0 },
});

describe("vote-ingest SIGKILLed between commit and hand-off", () => {
  it("when the process dies after the 201 and before any hand-off, then the restarted vote-ingest's outbox relay hands the delivery off and it is delivered once", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/hook"));
    const dispatcher = await stack.start("webhook-dispatcher");
    const deadRedis = `redis://127.0.0.1:${await freePort()}`;
    const doomed = await stack.start("vote-ingest", { REDIS_URL: deadRedis });

    const voter = randomUserId();
    const cast = await castVote(doomed.base, stack.keys.internalKey, bot.id, voter);
    await doomed.kill();

    expect(cast.status).toBe(201);
    const [pending] = await stack.deliveries(bot.id);
    expect(pending).toMatchObject({ state: "pending", attemptsMade: 0, handedOffAt: null });
    // Nothing reached the queue: the delivery exists only in PostgreSQL.
    const probe = new Redis(stack.redis.url, { maxRetriesPerRequest: 1 });
    try {
      // A job's hash key is <prefix>:<queue>:<job id>, and the job id is the delivery id.
      expect(await probe.exists(`${DEFAULT_QUEUE_PREFIX}:${QUEUES.webhookDeliveries}:${pending!.id}`)).toBe(
        0,
      );
    } finally {
      probe.disconnect();
    }
    expect(stack.receiver.requests).toHaveLength(0);
    expect(dispatcher.alive()).toBe(true);

    await stack.start("vote-ingest");

    await waitFor(
      async () => (await stack.deliveries(bot.id))[0]?.state === "delivered",
      "the delivery",
      30_000,
      100,
    );
    const attempts = await stack.attempts(pending!.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
    expect(stack.receiver.requests).toHaveLength(1);
    expect(stack.receiver.requests[0]!.headers["x-webhook-delivery"]).toBe(pending!.id);
    expect(JSON.parse(stack.receiver.requests[0]!.body.toString())).toMatchObject({
      bot_id: bot.id,
      user_id: voter,
    });
    const [delivered] = await stack.deliveries(bot.id);
    expect(delivered!.handedOffAt).not.toBeNull();
  });
});
