/**
 * `vote.batch` jobs with a real worker, Redis, PostgreSQL and HTTP receivers: every item is
 * delivered like a `vote.create` job, what the batch cannot finish goes to a job of its own, and a
 * batch run again delivers nothing twice.
 */
import { waitFor } from "@botdir/service-kit/testing";
import type { Job } from "bullmq";
import type { BatchResult } from "../src/worker.js";
import {
  type DispatcherHarness,
  type ReceivedRequest,
  type Reply,
  startDispatcherHarness,
} from "./support.js";

const CONCURRENCY = 3;
const FIRST_RETRY_MS = 600;

let h: DispatcherHarness;
const batchResults = new Map<string, BatchResult>();
const activeJobs: { job: Job; at: number }[] = [];

beforeAll(async () => {
  h = await startDispatcherHarness({
    workers: [
      {
        concurrency: CONCURRENCY,
        timeoutMs: 2_000,
        retryDelays: [FIRST_RETRY_MS, 50, 50, 50],
        maxInFlightPerWebhook: 2,
      },
    ],
  });
  h.worker.worker.on("completed", (job, result) => {
    if (job.name === "vote.batch" && job.id) batchResults.set(job.id, result as BatchResult);
  });
  h.worker.worker.on("active", (job) => activeJobs.push({ job, at: Date.now() }));
});
afterAll(() => h.close());

function waitForBatch(jobId: string): Promise<BatchResult> {
  return waitFor(() => batchResults.get(jobId), `batch job ${jobId} to complete`);
}

/** A receiver that answers `reply` and counts requests in progress (all paths / per path). */
async function countingReceiver(reply: (req: ReceivedRequest, n: number) => Reply) {
  const stats = { inFlight: 0, maxInFlight: 0 };
  const receiver = await h.receiver((req, n) => {
    const answer = reply(req, n);
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    // Registered before the receiver's own timer of the same delay, so it runs just before the
    // answer is written: a request counts until the client can see its answer.
    setTimeout(() => stats.inFlight--, answer === "hang" ? 0 : (answer.delayMs ?? 0));
    return answer;
  });
  return { receiver, stats };
}

const idsOf = (requests: ReceivedRequest[]) => requests.map((r) => r.headers["x-webhook-delivery"]);

describe("vote.batch jobs", () => {
  it("when a batch of eight deliveries of different bots runs, then each is delivered once over HTTP, attempts run concurrently but never more than DISPATCHER_CONCURRENCY at once, and nothing is handed to a job of its own", async () => {
    const { receiver, stats } = await countingReceiver(() => ({ status: 204, delayMs: 250 }));
    const arranged = await Promise.all(
      Array.from({ length: 8 }, (_, i) => h.arrange(receiver.url(`/all/${i}`))),
    );
    const deliveries = arranged.map((a) => a.delivery);

    const jobId = await h.handOffBatch(deliveries.map((d) => ({ id: d.id, botId: d.botId })));
    const result = await waitForBatch(jobId);

    expect(result).toEqual({ kind: "batch", finished: 8, handedOff: 0, left: 0 });
    for (const [i, d] of deliveries.entries()) {
      expect((await h.row(d.id)).state).toBe("delivered");
      expect(idsOf(receiver.forPath(`/all/${i}`))).toEqual([d.id]);
      const attempts = await h.attempts(d.id);
      expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
      expect(await h.queue.getJob(d.id)).toBeUndefined();
    }
    expect(stats.maxInFlight).toBeLessThanOrEqual(CONCURRENCY);
    expect(stats.maxInFlight).toBeGreaterThan(1);
  });

  it("when one item's receiver fails, then the others complete in the batch and that one is retried at its scheduled time by a vote.create job of its own carrying the attempts that remain", async () => {
    const { receiver } = await countingReceiver((req, n) =>
      req.path === "/flaky" && n === 1 ? { status: 500 } : { status: 204 },
    );
    const flaky = await h.arrange(receiver.url("/flaky"));
    const steady = await Promise.all([
      h.arrange(receiver.url("/steady/1")),
      h.arrange(receiver.url("/steady/2")),
    ]);
    const items = [flaky, ...steady].map(({ delivery }) => ({ id: delivery.id, botId: delivery.botId }));

    const jobId = await h.handOffBatch(items);
    const result = await waitForBatch(jobId);
    const row = await h.waitForState(flaky.delivery.id, "delivered");

    expect(result).toEqual({ kind: "batch", finished: 2, handedOff: 1, left: 0 });
    for (const { delivery } of steady) expect((await h.row(delivery.id)).state).toBe("delivered");
    const attempts = await h.attempts(flaky.delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, 500, "http_status"],
      [2, 204, null],
    ]);
    expect(row.attemptsMade).toBe(2);
    const requests = receiver.forPath("/flaky");
    expect(idsOf(requests)).toEqual([flaky.delivery.id, flaky.delivery.id]);
    // The retry waits for next_attempt_at, written FIRST_RETRY_MS after the first attempt ended.
    expect(requests[1]!.at).toBeGreaterThanOrEqual(attempts[0]!.attemptedAt.getTime() + FIRST_RETRY_MS);
    // The others were delivered by the batch, before the retry.
    for (const path of ["/steady/1", "/steady/2"]) {
      expect(receiver.forPath(path)).toHaveLength(1);
      expect(receiver.forPath(path)[0]!.at).toBeLessThan(requests[1]!.at);
    }
    const own = activeJobs.filter(({ job }) => job.id === flaky.delivery.id);
    expect(own).toHaveLength(1);
    expect(own[0]!.job.name).toBe("vote.create");
    expect(own[0]!.job.data).toEqual({ deliveryId: flaky.delivery.id, botId: flaky.delivery.botId });
    expect(own[0]!.job.opts.attempts).toBe(4); // five attempts, one made in the batch
    await h.jobGone(flaky.delivery.id);
  });

  it("when a batch carries more deliveries of one webhook than its cap, then the excess goes to jobs of their own, all are delivered once, and never more than the cap are in flight", async () => {
    const { receiver, stats } = await countingReceiver(() => ({ status: 204, delayMs: 100 }));
    const { bot, delivery: first } = await h.arrange(receiver.url("/capped"));
    const rest = await Promise.all(Array.from({ length: 5 }, () => h.seedDelivery(bot.id)));
    const deliveries = [first, ...rest];

    const jobId = await h.handOffBatch(deliveries.map((d) => ({ id: d.id, botId: bot.id })));
    const result = await waitForBatch(jobId);
    for (const d of deliveries) await h.waitForState(d.id, "delivered");

    expect(result.finished + result.handedOff).toBe(6);
    expect(result.left).toBe(0);
    // The webhook is not known to be quick before its first answer: one attempt at a time, then 2.
    expect(result.handedOff).toBeGreaterThanOrEqual(4);
    expect(stats.maxInFlight).toBeLessThanOrEqual(2);
    expect(idsOf(receiver.forPath("/capped")).sort()).toEqual(deliveries.map((d) => d.id).sort());
    for (const d of deliveries) expect(await h.attempts(d.id)).toHaveLength(1);
  });

  it("when a batch runs again after its items were delivered, then nothing is sent twice", async () => {
    const { receiver } = await countingReceiver(() => ({ status: 204 }));
    const arranged = await Promise.all(
      Array.from({ length: 3 }, (_, i) => h.arrange(receiver.url(`/again/${i}`))),
    );
    const items = arranged.map(({ delivery }) => ({ id: delivery.id, botId: delivery.botId }));
    const first = await waitForBatch(await h.handOffBatch(items));

    const second = await waitForBatch(await h.handOffBatch(items));

    expect(first).toEqual({ kind: "batch", finished: 3, handedOff: 0, left: 0 });
    expect(second).toEqual({ kind: "batch", finished: 3, handedOff: 0, left: 0 });
    expect(receiver.requests).toHaveLength(3);
    for (const { delivery } of arranged) expect(await h.attempts(delivery.id)).toHaveLength(1);
  });

  it("when a batch runs again after a crash left one item's attempt claimed, then the delivered item is not sent again and the claimed one waits in a job of its own for the lease, then counts the lost attempt and is delivered", async () => {
    const { receiver } = await countingReceiver(() => ({ status: 204 }));
    const done = await h.arrange(receiver.url("/crash/done"));
    const claimed = await h.arrange(receiver.url("/crash/claimed"));
    await waitForBatch(await h.handOffBatch([{ id: done.delivery.id, botId: done.delivery.botId }]));
    // What a dispatcher killed mid-attempt leaves behind: attempt 1 claimed, its lease running.
    const leaseUntil = new Date(Date.now() + 1_500);
    await h.db.pool.query(
      `UPDATE webhook_deliveries SET attempts_made = 1, lease_until = $2, attempt_started_at = now()
        WHERE id = $1`,
      [claimed.delivery.id, leaseUntil],
    );

    const rerun = await waitForBatch(
      await h.handOffBatch(
        [done, claimed].map(({ delivery }) => ({ id: delivery.id, botId: delivery.botId })),
      ),
    );
    await h.waitForState(claimed.delivery.id, "delivered");

    expect(rerun).toEqual({ kind: "batch", finished: 1, handedOff: 1, left: 0 });
    expect(receiver.forPath("/crash/done")).toHaveLength(1);
    expect(idsOf(receiver.forPath("/crash/claimed"))).toEqual([claimed.delivery.id]);
    expect(receiver.forPath("/crash/claimed")[0]!.at).toBeGreaterThanOrEqual(leaseUntil.getTime());
    const attempts = await h.attempts(claimed.delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "interrupted"],
      [2, 204, null],
    ]);
  });

  // Last: it closes the file's worker (a replacement delivers what it handed back).
  it("when the worker closes while batch items wait for an attempt slot, then it finishes the attempts in flight only and hands the waiting items to jobs of their own, which another worker delivers once", async () => {
    const { receiver } = await countingReceiver(() => ({ status: 204, delayMs: 800 }));
    const arranged = await Promise.all(
      Array.from({ length: 9 }, (_, i) => h.arrange(receiver.url(`/closing/${i}`))),
    );
    const deliveries = arranged.map((a) => a.delivery);
    const jobId = await h.handOffBatch(deliveries.map((d) => ({ id: d.id, botId: d.botId })));
    await waitFor(() => receiver.requests.length === CONCURRENCY, "the first attempts to reach the receiver");

    await h.worker.close();

    expect(receiver.requests).toHaveLength(CONCURRENCY);
    expect(batchResults.get(jobId)).toEqual({
      kind: "batch",
      finished: CONCURRENCY,
      handedOff: 9 - CONCURRENCY,
      left: 0,
    });
    const started = new Set(idsOf(receiver.requests));
    const waiting = deliveries.filter((d) => !started.has(d.id));
    for (const d of waiting) {
      const job = await h.queue.getJob(d.id);
      expect(job?.name).toBe("vote.create");
      expect(await job?.getState()).toBe("waiting");
    }

    await h.addWorker({ concurrency: CONCURRENCY, timeoutMs: 2_000 });
    for (const d of deliveries) await h.waitForState(d.id, "delivered");
    expect(idsOf(receiver.requests).sort()).toEqual(deliveries.map((d) => d.id).sort());
  });
});
