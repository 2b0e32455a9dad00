import { parseMetrics, sampleValue } from "@botdir/db/testing";
import { silentLogger } from "@botdir/service-kit/testing";
import request from "supertest";
import { createHttpApp } from "../src/app.js";
import { createDispatcherMetrics, type DispatcherMetrics } from "../src/metrics.js";
import { type DispatcherHarness, type Receiver, startDispatcherHarness } from "./support.js";

let h: DispatcherHarness;
let receiver: Receiver;

beforeAll(async () => {
  h = await startDispatcherHarness();
  // /flaky answers 500 to its first request and 204 afterwards; /ok always 204.
  receiver = await h.receiver((req, n) => ({ status: req.path === "/flaky" && n === 1 ? 500 : 204 }));
});

afterAll(() => h.close());

async function scrape(metrics: DispatcherMetrics) {
  const app = createHttpApp({ db: h.db, redis: h.worker.redis, logger: silentLogger, metrics });
  const res = await request(app).get("/metrics");
  expect(res.status).toBe(200);
  expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.text, samples: parseMetrics(res.text) };
}

async function deliveryTo(path: string, nextAttemptAt?: Date) {
  const { delivery } = await h.arrange(receiver.url(path), {
    secret: "whsec_metrics_secret",
    ...(nextAttemptAt ? { nextAttemptAt } : {}),
  });
  await h.handOff(delivery);
  return delivery;
}

describe("webhook-dispatcher GET /metrics", () => {
  it("when one attempt fails with a 500 and the retry succeeds, then outcomes are counted by error kind and attempt number, with durations, delivery latency and the queue depth", async () => {
    const ok = await deliveryTo("/ok");
    const flaky = await deliveryTo("/flaky");
    const later = await deliveryTo("/ok", new Date(Date.now() + 3_600_000));
    await h.waitForState(ok.id, "delivered");
    await h.waitForState(flaky.id, "delivered");

    const { text, samples } = await scrape(h.worker.metrics);
    const attempts = (outcome: string, errorKind: string, attempt: string) =>
      sampleValue(samples, "botdir_webhook_attempts_total", {
        app: "webhook-dispatcher",
        outcome,
        error_kind: errorKind,
        attempt,
      });
    expect(attempts("retry", "http_status", "1")).toBe(1);
    expect(attempts("delivered", "none", "1")).toBe(1);
    expect(attempts("delivered", "none", "2")).toBe(1);
    expect(attempts("failed", "http_status", "1")).toBeUndefined();
    expect(
      sampleValue(samples, "botdir_webhook_attempt_duration_seconds_count", { error_kind: "none" }),
    ).toBe(2);
    expect(
      sampleValue(samples, "botdir_webhook_attempt_duration_seconds_count", { error_kind: "http_status" }),
    ).toBe(1);
    expect(sampleValue(samples, "botdir_webhook_delivery_latency_seconds_count", { attempt: "1" })).toBe(1);
    expect(sampleValue(samples, "botdir_webhook_delivery_latency_seconds_count", { attempt: "2" })).toBe(1);
    // Measured from the vote (seeded before the hand-off) to the recording of the second attempt.
    expect(
      sampleValue(samples, "botdir_webhook_delivery_latency_seconds_sum", { attempt: "2" }),
    ).toBeGreaterThan(0);

    const depth = (state: string) =>
      sampleValue(samples, "botdir_queue_jobs", { queue: "webhook-deliveries", state });
    expect(depth("delayed")).toBe(1); // `later`, due in an hour
    expect(depth("waiting")).toBe(0);
    expect(depth("active")).toBe(0);
    expect(sampleValue(samples, "botdir_metrics_source_up", { source: "queue" })).toBe(1);
    expect(text).not.toContain(later.id);
    expect(text).not.toContain("whsec_metrics_secret");
  });

  it("when the job count does not answer within the scrape timeout, then the scrape still answers, with the queue source down and no stale depth", async () => {
    const stuck = createDispatcherMetrics({
      queue: { getJobCounts: () => new Promise(() => {}) },
      scrapeTimeoutMs: 50,
    });
    const { samples } = await scrape(stuck);

    expect(sampleValue(samples, "botdir_metrics_source_up", { source: "queue" })).toBe(0);
    expect(samples.filter((s) => s.name === "botdir_queue_jobs")).toEqual([]);
    expect(
      sampleValue(samples, "botdir_webhook_attempts_total", { outcome: "delivered", attempt: "1" }),
    ).toBe(0);
  });

  it("when nothing was attempted yet, then the unreadable-secret series is there at 0, so the first such failure is an increase", async () => {
    const { samples } = await scrape(createDispatcherMetrics());
    expect(
      sampleValue(samples, "botdir_webhook_attempts_total", {
        outcome: "failed",
        error_kind: "secret_unreadable",
        attempt: "1",
      }),
    ).toBe(0);
  });
});
