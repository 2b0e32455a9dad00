/**
 * Per-webhook and per-origin caps with a real worker, Redis and PostgreSQL: a job over a cap
 * holds no worker slot and uses no attempt, and runs as soon as its webhook has room.
 */
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createTestDatabase, seedBot, type TestDatabase, testRedisPrefix } from "@botdir/db/testing";
import { systemClock } from "@botdir/service-kit";
import { silentLogger, waitFor } from "@botdir/service-kit/testing";
import { createDispatcherMetrics, type DispatcherMetrics } from "../src/metrics.js";
import { createDispatcherWorker, type DispatcherConfig } from "../src/worker.js";
import {
  attemptRows,
  configureWebhook,
  deliveryRow,
  handOff,
  openQueue,
  secretBox,
  seedDelivery,
  testConfig,
  waitForState,
  workerRedis,
} from "./support.js";

let t: TestDatabase;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await t.drop();
});

/** A worker on its own queue prefix, with a metrics registry to read. */
async function dispatcher(overrides: Partial<DispatcherConfig>) {
  const prefix = testRedisPrefix();
  const queue = openQueue(prefix);
  const redis = workerRedis();
  const metrics: DispatcherMetrics = createDispatcherMetrics();
  const worker = createDispatcherWorker(
    { db: t.db, redis, secrets: secretBox, clock: systemClock, logger: silentLogger, metrics },
    testConfig(prefix, { timeoutMs: 1_500, ...overrides }),
  );
  await worker.waitUntilReady();
  cleanups.push(async () => {
    await worker.close();
    redis.disconnect();
    await queue.close();
  });
  return { queue: queue.queue, metrics };
}

interface CountingReceiver {
  url(path: string): string;
  /** Requests received, per path, and the most in progress at once (all paths). */
  received: Map<string, number>;
  maxInFlight: number;
  total(): number;
  /** When each request arrived, in order (Date.now()). */
  arrivals: number[];
  /** Ends every held request (the client sees the connection close). */
  release(): void;
}

/** A receiver that answers 204 after `delayMs`, or holds the request (`hold`) until the client gives up. */
async function countingReceiver(reply: (path: string) => number | "hold"): Promise<CountingReceiver> {
  let inFlight = 0;
  const state: CountingReceiver = {
    url: () => "",
    received: new Map(),
    maxInFlight: 0,
    total: () => [...state.received.values()].reduce((a, b) => a + b, 0),
    arrivals: [],
    release: () => {
      for (const res of held) res.destroy();
    },
  };
  const held = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    const path = req.url ?? "";
    state.received.set(path, (state.received.get(path) ?? 0) + 1);
    state.arrivals.push(Date.now());
    inFlight++;
    state.maxInFlight = Math.max(state.maxInFlight, inFlight);
    res.once("close", () => inFlight--);
    req.resume();
    const answer = reply(path);
    if (answer === "hold") {
      held.add(res);
      return;
    }
    setTimeout(() => {
      res.statusCode = 204;
      res.end();
    }, answer);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  state.url = (path) => `http://127.0.0.1:${port}${path}`;
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return state;
}

async function botWithWebhook(url: string) {
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, url, "whsec_fair");
  return bot.id;
}

async function metricValue(metrics: DispatcherMetrics, name: string, cap: string): Promise<number> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => v.labels.cap === cap)?.value ?? 0;
}

describe("per-webhook fairness", () => {
  it("when one bot's receiver holds every request, then it holds one slot (not yet known to answer quickly), other bots' deliveries arrive long before its timeout, and the jobs put back use no attempt", async () => {
    const receiver = await countingReceiver((path) => (path.startsWith("/tarpit") ? "hold" : 5));
    // Four slots in all: without the caps, the tarpit's eight jobs would take every one until the
    // 30 s timeout, twice the deadline the healthy deliveries get.
    const { queue, metrics } = await dispatcher({
      concurrency: 4,
      maxInFlightPerWebhook: 2,
      timeoutMs: 30_000,
    });
    const tarpit = await botWithWebhook(receiver.url("/tarpit"));
    const stuck = await Promise.all(Array.from({ length: 8 }, () => seedDelivery(t.db, tarpit)));
    for (const d of stuck) await handOff(queue, d);
    await waitFor(async () => receiver.received.get("/tarpit") === 1, "the tarpit to hold a request");

    const started = Date.now();
    const healthy = await Promise.all(
      Array.from({ length: 6 }, async (_, i) => {
        const botId = await botWithWebhook(receiver.url(`/healthy/${i}`));
        return seedDelivery(t.db, botId);
      }),
    );
    for (const d of healthy) await handOff(queue, d);
    await Promise.all(healthy.map((d) => waitForState(t.db, d.id, "delivered", 15_000)));
    const elapsed = Date.now() - started;

    // Expected in about 100 ms; the bound is half the tarpit's timeout.
    expect(elapsed).toBeLessThan(15_000);
    expect(receiver.received.get("/tarpit")).toBe(1);
    const made = await Promise.all(stuck.map(async (d) => (await deliveryRow(t.db, d.id)).attemptsMade));
    receiver.release();
    expect(made.filter((n) => n === 1)).toHaveLength(1);
    expect(made.filter((n) => n === 0)).toHaveLength(7);
    expect(
      await metricValue(metrics, "botdir_webhook_jobs_deferred_total", "webhook"),
    ).toBeGreaterThanOrEqual(7);
  });

  it("when a webhook that answered quickly starts holding every request, then no attempt starts beside the hanging ones after DISPATCHER_SLOW_ATTEMPT_MS, and after their timeouts it runs one at a time", async () => {
    let answered = 0;
    const receiver = await countingReceiver(() => (answered++ === 0 ? 5 : "hold"));
    // Attempts time out at 5 s: the checks below run while the two hang, past 300 ms.
    const { queue, metrics } = await dispatcher({
      concurrency: 10,
      maxInFlightPerWebhook: 3,
      slowAttemptMs: 300,
      timeoutMs: 5_000,
    });
    const botId = await botWithWebhook(receiver.url("/turns-bad"));
    const first = await seedDelivery(t.db, botId);
    await handOff(queue, first);
    await waitForState(t.db, first.id, "delivered", 5_000);

    // Known to be fast (cap 3): two attempts start and hang.
    const hanging = await Promise.all(Array.from({ length: 2 }, () => seedDelivery(t.db, botId)));
    for (const d of hanging) await handOff(queue, d);
    await waitFor(async () => receiver.total() === 3, "two hanging attempts");
    const hangingSince = receiver.arrivals[2]!;
    await waitFor(async () => Date.now() - hangingSince >= 400, "400 ms of hanging");
    // Past 300 ms they count as hanging: a third one does not start, although the cap is three.
    const deferred = () => metricValue(metrics, "botdir_webhook_jobs_deferred_total", "webhook");
    const deferredBefore = await deferred();
    const later = await Promise.all(Array.from({ length: 4 }, () => seedDelivery(t.db, botId)));
    for (const d of later) await handOff(queue, d);
    // Each later job has been looked at and put back: had one been admitted, it would have started.
    await waitFor(async () => (await deferred()) >= deferredBefore + 4, "the later jobs to be deferred");
    expect(receiver.total()).toBe(3);
    expect(Date.now() - hangingSince).toBeLessThan(5_000); // still inside the two attempts' timeout
    // They time out at 5 s ("timeout": slow); from then on one attempt at a time: the next starts
    // after both hanging ones ended, and the one after it only once that one has timed out too.
    await waitFor(async () => receiver.total() === 4, "the next attempt after the timeouts", 15_000);
    await waitFor(async () => receiver.total() === 5, "the attempt after that one", 15_000);
    // Each attempt's end as the dispatcher recorded it (start + duration; 5 ms for rounding).
    const end = (a: { attemptedAt: Date; durationMs: number }) => a.attemptedAt.getTime() + a.durationMs - 5;
    const firstAttempts = (await Promise.all(hanging.map((d) => attemptRows(t.db, d.id)))).map(
      (rows) => rows[0]!,
    );
    expect(receiver.arrivals[3]!).toBeGreaterThanOrEqual(Math.max(...firstAttempts.map(end)));
    // The newest recorded attempt is the one that sent the fourth request (the fifth still hangs).
    const recorded = (await Promise.all([...hanging, ...later].map((d) => attemptRows(t.db, d.id)))).flat();
    const newest = recorded.reduce((a, b) => (b.attemptedAt > a.attemptedAt ? b : a));
    expect(newest.attemptedAt.getTime()).toBeGreaterThanOrEqual(Math.max(...firstAttempts.map(end)));
    expect(receiver.arrivals[4]!).toBeGreaterThanOrEqual(end(newest));
    expect(receiver.maxInFlight).toBe(2);
    receiver.release();
  });

  it("when a webhook has more jobs than its cap, then at most the cap run at once and each waiting job runs as soon as a slot ends, with one attempt each", async () => {
    const receiver = await countingReceiver(() => 200);
    // The fallback delay of a parked job is the lease (1.5 s + 30 s): finishing within the 15 s
    // deadline shows that the jobs were woken when a slot ended (expected: about 600 ms).
    const { queue, metrics } = await dispatcher({
      concurrency: 10,
      maxInFlightPerWebhook: 2,
      lockDurationMs: 30_000,
    });
    const botId = await botWithWebhook(receiver.url("/busy"));
    const deliveries = await Promise.all(Array.from({ length: 6 }, () => seedDelivery(t.db, botId)));
    const started = Date.now();

    for (const d of deliveries) await handOff(queue, d);
    await Promise.all(deliveries.map((d) => waitForState(t.db, d.id, "delivered", 15_000)));

    expect(Date.now() - started).toBeLessThan(15_000);
    expect(receiver.maxInFlight).toBe(2);
    expect(receiver.total()).toBe(6);
    for (const d of deliveries) {
      expect((await attemptRows(t.db, d.id)).map((a) => [a.attemptNumber, a.statusCode])).toEqual([[1, 204]]);
    }
    expect(await metricValue(metrics, "botdir_webhook_jobs_woken_total", "webhook")).toBeGreaterThanOrEqual(
      1,
    );
  });

  it("when many bots share one origin, then the origin's cap holds across them", async () => {
    const receiver = await countingReceiver(() => 150);
    const { queue } = await dispatcher({
      concurrency: 20,
      maxInFlightPerWebhook: 2,
      maxInFlightPerOrigin: 3,
    });
    const bots = await Promise.all(
      Array.from({ length: 4 }, (_, i) => botWithWebhook(receiver.url(`/provider/${i}`))),
    );
    // One delivery per bot first: the dispatcher learns each bot's origin from its claim.
    const first = await Promise.all(bots.map((botId) => seedDelivery(t.db, botId)));
    for (const d of first) await handOff(queue, d);
    await Promise.all(first.map((d) => waitForState(t.db, d.id, "delivered", 5_000)));
    receiver.maxInFlight = 0;

    const burst = await Promise.all(bots.flatMap((botId) => [0, 1, 2].map(() => seedDelivery(t.db, botId))));
    for (const d of burst) await handOff(queue, d);
    await Promise.all(burst.map((d) => waitForState(t.db, d.id, "delivered", 10_000)));

    expect(receiver.maxInFlight).toBe(3);
  });

  it("when a job does not name its bot (handed off before jobs did), then the cap applies all the same", async () => {
    const receiver = await countingReceiver(() => 150);
    const { queue } = await dispatcher({ concurrency: 10, maxInFlightPerWebhook: 1 });
    const botId = await botWithWebhook(receiver.url("/legacy"));
    const deliveries = await Promise.all(Array.from({ length: 3 }, () => seedDelivery(t.db, botId)));

    for (const d of deliveries) await handOff(queue, { id: d.id, nextAttemptAt: d.nextAttemptAt });
    await Promise.all(deliveries.map((d) => waitForState(t.db, d.id, "delivered", 10_000)));

    expect(receiver.maxInFlight).toBe(1);
  });
});
