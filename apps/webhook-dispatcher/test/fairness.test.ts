/**
 * Per-webhook and per-origin caps with a real worker, Redis and PostgreSQL: a job over a cap
 * holds no worker slot and uses no attempt, and runs as soon as its webhook has room.
 */
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { waitFor } from "@botdir/service-kit/testing";
import type { DispatcherMetrics } from "../src/metrics.js";
import type { DispatcherConfig } from "../src/worker.js";
import {
  type DispatcherHarness,
  type SeededDelivery,
  startDispatcherHarness,
  type WebhookBot,
} from "./support.js";

/** What the running test started (its receiver, its harness): ended after it, last first. */
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A harness of the test's own (database, queue prefix, one worker) with `overrides`. */
async function dispatcher(overrides: Partial<DispatcherConfig>): Promise<DispatcherHarness> {
  const h = await startDispatcherHarness({ workers: [{ timeoutMs: 1_500, ...overrides }] });
  cleanups.push(() => h.close());
  return h;
}

/** `n` new deliveries of `webhook`'s bot, handed off in order. */
async function handOffNew(h: DispatcherHarness, webhook: WebhookBot, n: number): Promise<SeededDelivery[]> {
  const deliveries = await Promise.all(Array.from({ length: n }, () => webhook.newDelivery()));
  for (const d of deliveries) await h.handOff(d);
  return deliveries;
}

/** A request as it arrived: the delivery it carries (webhook-id), its number for that delivery, when. */
interface Arrival {
  id: string;
  n: number;
  at: number;
}

interface CountingReceiver {
  url(path: string): string;
  /** Requests received, per path, and the most in progress at once (all paths). */
  received: Map<string, number>;
  maxInFlight: number;
  total(): number;
  /** Every request, in arrival order (Date.now()). */
  arrivals: Arrival[];
  /** Waits for the `n`th request of all (1-based). */
  nth(n: number, timeoutMs?: number): Promise<Arrival>;
  /** Waits for the `n`th request carrying delivery `id` (1-based). */
  request(id: string, n: number, timeoutMs?: number): Promise<Arrival>;
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
    nth: (n, timeoutMs) => waitFor(() => state.arrivals[n - 1], `request ${n}`, timeoutMs),
    request: (id, n, timeoutMs) =>
      waitFor(
        () => state.arrivals.find((a) => a.id === id && a.n === n),
        `request ${n} of delivery ${id}`,
        timeoutMs,
      ),
    release: () => {
      for (const res of held) res.destroy();
    },
  };
  const held = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    const path = req.url ?? "";
    const id = String(req.headers["webhook-id"]);
    state.received.set(path, (state.received.get(path) ?? 0) + 1);
    const n = state.arrivals.filter((a) => a.id === id).length + 1;
    state.arrivals.push({ id, n, at: Date.now() });
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

async function metricValue(metrics: DispatcherMetrics, name: string, cap: string): Promise<number> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => v.labels.cap === cap)?.value ?? 0;
}

describe("per-webhook fairness", () => {
  it("when one bot's receiver holds every request, then it holds one slot (not yet known to answer quickly), other bots' deliveries arrive long before its timeout, and the jobs put back use no attempt", async () => {
    const receiver = await countingReceiver((path) => (path.startsWith("/tarpit") ? "hold" : 5));
    // Four slots in all: without the caps, the tarpit's eight jobs would take every one until the
    // 30 s timeout, twice the deadline the healthy deliveries get.
    const h = await dispatcher({ concurrency: 4, maxInFlightPerWebhook: 2, timeoutMs: 30_000 });
    const stuck = await handOffNew(h, await h.webhookBot(receiver.url("/tarpit")), 8);
    await waitFor(async () => receiver.received.get("/tarpit") === 1, "the tarpit to hold a request");

    const started = Date.now();
    const healthy = await Promise.all(
      Array.from({ length: 6 }, async (_, i) =>
        (await h.webhookBot(receiver.url(`/healthy/${i}`))).newDelivery(),
      ),
    );
    for (const d of healthy) await h.handOff(d);
    await Promise.all(healthy.map((d) => h.waitForState(d.id, "delivered", 15_000)));
    const elapsed = Date.now() - started;

    // Expected in about 100 ms; the bound is half the tarpit's timeout.
    expect(elapsed).toBeLessThan(15_000);
    expect(receiver.received.get("/tarpit")).toBe(1);
    const made = await Promise.all(stuck.map(async (d) => (await h.row(d.id)).attemptsMade));
    receiver.release();
    expect(made.filter((n) => n === 1)).toHaveLength(1);
    expect(made.filter((n) => n === 0)).toHaveLength(7);
    expect(
      await metricValue(h.worker.metrics, "botdir_webhook_jobs_deferred_total", "webhook"),
    ).toBeGreaterThanOrEqual(7);
  });

  it("when a webhook that answered quickly starts holding every request, then no attempt starts beside the hanging ones after DISPATCHER_SLOW_ATTEMPT_MS, and after their timeouts it runs one at a time", async () => {
    let answered = 0;
    const receiver = await countingReceiver(() => (answered++ === 0 ? 5 : "hold"));
    // Slow past 2 s, as in production: the two hanging attempts start well within that of each
    // other, however loaded the machine. They time out at 8 s, long after the later jobs are put back.
    const h = await dispatcher({
      concurrency: 10,
      maxInFlightPerWebhook: 3,
      slowAttemptMs: 2_000,
      timeoutMs: 8_000,
    });
    const webhook = await h.webhookBot(receiver.url("/turns-bad"));
    const [first] = await handOffNew(h, webhook, 1);
    await h.waitForState(first!.id, "delivered");

    // Known to be fast (cap 3): two attempts start and hang.
    const hanging = await Promise.all(
      (await handOffNew(h, webhook, 2)).map((d) => receiver.request(d.id, 1)),
    );
    const hangingSince = Math.max(...hanging.map((r) => r.at));
    await waitFor(async () => Date.now() - hangingSince >= 2_100, "both attempts to hang past 2 s");
    // Past 2 s they count as hanging: a third one does not start, although the cap is three.
    const deferred = () => metricValue(h.worker.metrics, "botdir_webhook_jobs_deferred_total", "webhook");
    const deferredBefore = await deferred();
    await handOffNew(h, webhook, 4);
    // Each later job has been looked at and put back: had one been admitted, it would have started.
    await waitFor(async () => (await deferred()) >= deferredBefore + 4, "the later jobs to be deferred");
    expect(receiver.total()).toBe(3);
    // Still inside the two attempts' timeout: neither has ended (an attempt is recorded when it ends).
    expect(await Promise.all(hanging.map((r) => h.attempts(r.id)))).toEqual([[], []]);

    // They time out ("timeout": slow); from then on one attempt at a time: the fourth request
    // (a later job, or a hanging one's retry) starts after both hanging ones ended, and the fifth
    // only once the fourth has timed out too.
    const ended = (a: { attemptedAt: Date; durationMs: number }) =>
      a.attemptedAt.getTime() + a.durationMs - 5;
    /** The attempt that sent `request` (a delivery's nth request is its attempt n), once recorded. */
    const attemptOf = (request: Arrival) =>
      waitFor(
        async () => (await h.attempts(request.id)).find((a) => a.attemptNumber === request.n),
        `attempt ${request.n} of delivery ${request.id} to be recorded`,
        30_000,
      );
    const hangingEnded = Math.max(...(await Promise.all(hanging.map(attemptOf))).map(ended));
    const fourth = await receiver.nth(4, 30_000);
    expect(fourth.at).toBeGreaterThanOrEqual(hangingEnded);
    const fifth = await receiver.nth(5, 30_000);
    const fourthAttempt = await attemptOf(fourth);
    expect(fourthAttempt.attemptedAt.getTime()).toBeGreaterThanOrEqual(hangingEnded);
    expect(fifth.at).toBeGreaterThanOrEqual(ended(fourthAttempt));
    expect(receiver.maxInFlight).toBe(2);
    receiver.release();
  });

  it("when a webhook has more jobs than its cap, then at most the cap run at once and each waiting job runs as soon as a slot ends, with one attempt each", async () => {
    const receiver = await countingReceiver(() => 200);
    // The fallback delay of a parked job is the lease (1.5 s + 30 s): finishing within the 15 s
    // deadline shows that the jobs were woken when a slot ended (expected: about 600 ms).
    const h = await dispatcher({ concurrency: 10, maxInFlightPerWebhook: 2, lockDurationMs: 30_000 });
    const webhook = await h.webhookBot(receiver.url("/busy"));
    const started = Date.now();

    const deliveries = await handOffNew(h, webhook, 6);
    await Promise.all(deliveries.map((d) => h.waitForState(d.id, "delivered", 15_000)));

    expect(Date.now() - started).toBeLessThan(15_000);
    expect(receiver.maxInFlight).toBe(2);
    expect(receiver.total()).toBe(6);
    for (const d of deliveries) {
      expect((await h.attempts(d.id)).map((a) => [a.attemptNumber, a.statusCode])).toEqual([[1, 204]]);
    }
    expect(
      await metricValue(h.worker.metrics, "botdir_webhook_jobs_woken_total", "webhook"),
    ).toBeGreaterThanOrEqual(1);
  });

  it("when many bots share one origin, then the origin's cap holds across them", async () => {
    const receiver = await countingReceiver(() => 150);
    const h = await dispatcher({ concurrency: 20, maxInFlightPerWebhook: 2, maxInFlightPerOrigin: 3 });
    const bots = await Promise.all(
      Array.from({ length: 4 }, (_, i) => h.webhookBot(receiver.url(`/provider/${i}`))),
    );
    // One delivery per bot first: the dispatcher learns each bot's origin from its claim.
    const first = (await Promise.all(bots.map((webhook) => handOffNew(h, webhook, 1)))).flat();
    await Promise.all(first.map((d) => h.waitForState(d.id, "delivered", 5_000)));
    receiver.maxInFlight = 0;

    const burst = (await Promise.all(bots.map((webhook) => handOffNew(h, webhook, 3)))).flat();
    await Promise.all(burst.map((d) => h.waitForState(d.id, "delivered", 10_000)));

    expect(receiver.maxInFlight).toBe(3);
  });

  it("when a job does not name its bot (handed off before jobs did), then the cap applies all the same", async () => {
    const receiver = await countingReceiver(() => 150);
    const h = await dispatcher({ concurrency: 10, maxInFlightPerWebhook: 1 });
    const webhook = await h.webhookBot(receiver.url("/legacy"));
    const deliveries = await Promise.all(Array.from({ length: 3 }, () => webhook.newDelivery()));

    for (const d of deliveries) await h.handOff({ id: d.id, nextAttemptAt: d.nextAttemptAt });
    await Promise.all(deliveries.map((d) => h.waitForState(d.id, "delivered", 10_000)));

    expect(receiver.maxInFlight).toBe(1);
  });
});
