/**
 * Fault: webhook receivers that misbehave on purpose. Each costs exactly one failed attempt with the
 * right error kind; the dispatcher process's memory stays flat and its other deliveries go through
 * while a hostile one is in flight.
 */
import { randomUserId } from "@botdir/db/testing";
import { waitFor } from "../../src/processes.js";
import {
  type RawServer,
  startHugeBodyReceiver,
  startResettingReceiver,
  startSelfSignedReceiver,
  startSlowDripReceiver,
  type TlsReceiver,
} from "../../src/receivers.js";
import { type Stack, startStack } from "../../src/stack.js";

/** The attempt timeout: ten good deliveries take well under a second; 10 s leaves a loaded machine room. */
const TIMEOUT_MS = 10_000;
let stack: Stack;
let slow: RawServer;
let huge: RawServer;
let reset: RawServer;
let tls: TlsReceiver;

beforeAll(async () => {
  [stack, slow, huge, reset, tls] = await Promise.all([
    // A retry is an hour away: every hostile receiver gets exactly one attempt during the test.
    startStack({
      privateRedis: true,
      replicas: { api: 0 },
      env: {
        WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
        WEBHOOK_RETRY_DELAYS_MS: "3600000,3600000,3600000,3600000",
        DISPATCHER_LOCK_DURATION_MS: "30000",
        DISPATCHER_CONCURRENCY: "10",
      },
    }),
    startSlowDripReceiver(100),
    startHugeBodyReceiver(),
    startResettingReceiver(),
    startSelfSignedReceiver(),
  ]);
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  await Promise.all([slow, huge, reset, tls].map((r) => r?.close()));
});

async function voteFor(url: string) {
  const bot = await stack.webhookBot(url);
  const cast = await stack.vote(bot.id, randomUserId());
  expect(cast.status).toBe(201);
  return bot;
}

/** Waits until the bot's single delivery has its first attempt recorded, and returns it. */
async function firstAttempt(botId: string, timeoutMs = 30_000) {
  return waitFor(
    async () => {
      const [delivery] = await stack.deliveries(botId);
      if (!delivery) return null;
      const attempts = await stack.attempts(delivery.id);
      return attempts.length > 0 ? { delivery, attempts } : null;
    },
    `the first attempt of bot ${botId}`,
    timeoutMs,
    50,
  );
}

describe("hostile webhook receivers", () => {
  it("when a receiver drips its status line byte by byte, then the attempt fails as timeout, and deliveries to a good receiver go through meanwhile", async () => {
    const slowBot = await voteFor(`http://127.0.0.1:${slow.port}/hook`);
    await waitFor(
      () => slow.connections === 1 && slow.bytesWritten > 0,
      "the slow receiver to start dripping",
    );
    const started = Date.now();

    const goodBots = await Promise.all(
      Array.from({ length: 10 }, () => voteFor(stack.receiver.url("/hook"))),
    );
    await waitFor(
      async () => {
        const rows = await Promise.all(goodBots.map((b) => stack.deliveries(b.id)));
        return rows.every((r) => r[0]?.state === "delivered");
      },
      "the good deliveries",
      TIMEOUT_MS,
      25,
    );
    const goodDone = Date.now();
    // The slow attempt is still in flight: nothing recorded for it yet.
    const [slowDelivery] = await stack.deliveries(slowBot.id);
    expect(await stack.attempts(slowDelivery!.id)).toHaveLength(0);
    expect(goodDone - started).toBeLessThan(TIMEOUT_MS);

    const { delivery, attempts } = await firstAttempt(slowBot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, null, "timeout"]]);
    expect(attempts[0]!.durationMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 100);
    expect(attempts[0]!.durationMs).toBeLessThan(TIMEOUT_MS * 2);
    expect(delivery).toMatchObject({ state: "pending", attemptsMade: 1 });
    expect(stack.receiver.requests).toHaveLength(10);
  });

  it("when a receiver answers 500 with a 1 GiB body, then the attempt fails as http_status 500 without the body being read, and the dispatcher's memory does not grow", async () => {
    const before = stack.dispatcher.rssBytes();
    const bot = await voteFor(`http://127.0.0.1:${huge.port}/hook`);
    const { attempts } = await firstAttempt(bot.id);

    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, 500, "http_status"],
    ]);
    // The dispatcher hung up after the status line: only what fit in socket buffers was written.
    await waitFor(() => huge.bytesWritten < 1024 ** 3, "the huge body to be cut off");
    expect(huge.bytesWritten).toBeLessThan(64 * 1024 ** 2);
    const after = stack.dispatcher.rssBytes();
    expect(after - before).toBeLessThan(64 * 1024 ** 2);
    expect(stack.dispatcher.alive()).toBe(true);
  });

  it("when a receiver resets the connection, then the attempt fails as connection", async () => {
    const bot = await voteFor(`http://127.0.0.1:${reset.port}/hook`);
    const { attempts } = await firstAttempt(bot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "connection"],
    ]);
    expect(reset.connections).toBe(1);
  });

  it("when a receiver presents a self-signed certificate, then the attempt fails as tls and no request is sent", async () => {
    const bot = await voteFor(tls.url("/hook"));
    const { attempts } = await firstAttempt(bot.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, null, "tls"]]);
    expect(tls.requests).toHaveLength(0);
  });

  it("when every hostile receiver has been tried, then the dispatcher still delivers to a good receiver at once and is healthy", async () => {
    const before = stack.receiver.requests.length;
    const bot = await voteFor(stack.receiver.url("/after"));
    const { attempts } = await firstAttempt(bot.id, 5_000);
    expect(attempts.map((a) => [a.statusCode, a.errorKind])).toEqual([[204, null]]);
    expect(stack.receiver.requests.length).toBe(before + 1);
    const health = await fetch(`${stack.dispatcher.base}/health`);
    expect(health.status).toBe(200);
  });
});
