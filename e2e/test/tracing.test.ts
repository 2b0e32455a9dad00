/**
 * Traces across the real processes, run from their production bundles (`dist/main.js`: the spans
 * are ours, so they must exist where instrumentation hooks could not patch anything), exporting
 * OTLP/HTTP JSON to a receiver inside the test (docs/tracing.md):
 * - one vote, cast under the site frontend's `traceparent`, is one trace: vote-ingest's server span,
 *   its statement and the hand-off (producer), the dispatcher's consumer span, claim, POST (client)
 *   and record; the receiver got the trace id in X-Webhook-Trace, the owner's delivery log shows it,
 *   and the log lines of vote-ingest and the dispatcher for it carry it; a /check sent to the
 *   public API under that trace's `traceparent` runs in a new trace (its limiter and statement
 *   spans below its server span) that only links to the caller's span;
 * - a first attempt answered 500 and its retry are in one trace;
 * - a vote.batch job's consumer span links to each vote's context, each vote's attempt in its trace;
 * - a test event carries the trace id of the request that sent it;
 * - a redelivery (the owner's, botctl's) starts a new trace, linked to the first;
 * - a vote cast while Redis is down and handed off later by the outbox relay keeps its trace.
 * Build first (`pnpm build`): the test starts the apps from dist/.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { promisify } from "node:util";
import { randomUserId } from "@botdir/db/testing";
import { type OtlpReceiver, type ReceivedSpan, SPAN_KIND, startOtlpReceiver } from "../src/otlp.js";
import { type AppProcess, baseEnv, call, REPO_ROOT, waitFor } from "../src/processes.js";
import { type Stack, useStack } from "../src/stack.js";

// Asynchronous: the OTLP receiver botctl exports to runs in this process.
const run = promisify(execFile);

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

/** A W3C traceparent of a new sampled trace, as the site frontend sends it. */
function frontendTrace(): { traceId: string; spanId: string; traceparent: string } {
  const traceId = hex(16);
  const spanId = hex(8);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

// Started as the file loads: the stacks' environments name its address.
const otlp: OtlpReceiver = await startOtlpReceiver();
afterAll(() => otlp.close());

/** What every tracing stack runs with: info logs (to read trace_id) and the test's receiver. */
const tracedEnv = () => ({
  LOG_LEVEL: "info",
  OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
});

/** A vote cast under `traceparent` on the stack's vote-ingest. */
function voteUnder(stack: Stack, botId: string, traceparent: string) {
  return call(`${stack.ingest.base}/internal/v1/votes`, {
    method: "POST",
    headers: { authorization: stack.keys.internalKey, traceparent },
    body: { bot_id: botId, user_id: randomUserId() },
  });
}

/** Waits until the trace holds a span matching `match`, and returns it. */
function spanOf(traceId: string, what: string, match: (s: ReceivedSpan) => boolean): Promise<ReceivedSpan> {
  return waitFor(() => otlp.trace(traceId).find(match), `${what} in trace ${traceId}`, 30_000);
}

const named = (service: string, name: string, kind?: number) => (s: ReceivedSpan) =>
  s.service === service && s.name === name && (kind === undefined || s.kind === kind);

/** The JSON log lines a process wrote with this trace id. */
function logLines(proc: AppProcess, traceId: string): Record<string, unknown>[] {
  return proc
    .output()
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    })
    .filter((line) => line.trace_id === traceId);
}

/** The path of the one vote's span chain, ingest to dispatcher, asserted parent by parent. */
async function expectVoteTrace(traceId: string, frontendSpanId: string) {
  const server = await spanOf(
    traceId,
    "vote-ingest's server span",
    named("botdir-vote-ingest", "POST /internal/v1/votes", SPAN_KIND.server),
  );
  expect(server.parentSpanId).toBe(frontendSpanId);
  expect(server.attributes["http.route"]).toBe("/internal/v1/votes");
  expect(server.attributes["http.response.status_code"]).toBe(201);
  const statement = await spanOf(
    traceId,
    "the cast statement",
    named("botdir-vote-ingest", "pg.cast_vote", SPAN_KIND.client),
  );
  expect(statement.parentSpanId).toBe(server.spanId);
  const publish = await spanOf(
    traceId,
    "the hand-off",
    named("botdir-vote-ingest", "webhook-deliveries publish", SPAN_KIND.producer),
  );
  expect(publish.parentSpanId).toBe(server.spanId);
  const consumer = await spanOf(
    traceId,
    "the dispatcher's consumer span",
    named("botdir-webhook-dispatcher", "webhook-deliveries process", SPAN_KIND.consumer),
  );
  expect(consumer.parentSpanId).toBe(publish.spanId);
  for (const step of ["webhook.claim", "webhook.record"]) {
    const span = await spanOf(traceId, step, named("botdir-webhook-dispatcher", step));
    expect(span.parentSpanId).toBe(consumer.spanId);
  }
  const post = await spanOf(
    traceId,
    "the webhook POST",
    named("botdir-webhook-dispatcher", "POST", SPAN_KIND.client),
  );
  expect(post.parentSpanId).toBe(consumer.spanId);
  return { server, publish, consumer, post };
}

describe("traces on the shared stores", () => {
  const stack = useStack({
    dist: true,
    env: tracedEnv(),
    // /retry: the first attempt is answered 500, the next 204.
    reply: (req, n) => ({ status: req.path === "/retry" && n === 1 ? 500 : 204 }),
  });

  it("when the site casts a vote under its traceparent, then one trace runs from the vote to the receiver, which gets its id, as do the delivery log and the three apps' log lines", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/hook"));
    const page = frontendTrace();
    expect((await voteUnder(stack, bot.id, page.traceparent)).status).toBe(201);
    const [received] = await waitFor(async () => {
      const got = stack.receiver.forPath("/hook");
      return got.length > 0 ? got : null;
    }, "the webhook");
    expect(received?.headers["x-webhook-trace"]).toBe(page.traceId);
    expect(received?.headers.traceparent).toBeUndefined();

    const { post } = await expectVoteTrace(page.traceId, page.spanId);
    const [delivery] = await stack.deliveries(bot.id);
    expect(post.attributes).toMatchObject({
      "botdir.delivery_id": delivery?.id,
      "botdir.bot_id": bot.id,
      "botdir.attempt": 1,
      "http.response.status_code": 204,
    });
    // Never the receiver's path (nor query) in an attribute.
    expect(JSON.stringify(post.attributes)).not.toContain("/hook");

    // A bot checks the vote on the public API under a traceparent of its own: the public edge starts
    // a new trace (its server span by route template, `/check`'s only span) and keeps the caller's
    // span only as a link, never as its parent.
    const callerSpan = hex(8);
    const check = await call(`${stack.api.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`, {
      headers: { authorization: bot.token, traceparent: `00-${page.traceId}-${callerSpan}-01` },
    });
    expect(check.status).toBe(200);
    const apiServer = await waitFor(
      () =>
        otlp.spans.find(
          (s) =>
            named("botdir-api", "GET /api/v1/bots/:id/check", SPAN_KIND.server)(s) &&
            s.links.some((l) => l.traceId === page.traceId),
        ),
      "the API's server span linked to the caller's",
      30_000,
    );
    expect(apiServer.traceId).not.toBe(page.traceId);
    expect(apiServer.parentSpanId).toBe("");
    expect(apiServer.links).toEqual([{ traceId: page.traceId, spanId: callerSpan }]);
    // Its limiter decision and its read make no span (they would end, and be exported, first).
    expect(otlp.trace(apiServer.traceId).map((s) => s.name)).toEqual(["GET /api/v1/bots/:id/check"]);
    expect(otlp.trace(page.traceId).filter((s) => s.service === "botdir-api")).toEqual([]);

    // Another route of the API: its limiter's and PostgreSQL's work are children of its server span.
    const isStats = named("botdir-api", "POST /api/v1/bots/:id/stats", SPAN_KIND.server);
    const statsBefore = otlp.spans.filter(isStats).length;
    const posted = await call(`${stack.api.base}/api/v1/bots/${bot.id}/stats`, {
      method: "POST",
      headers: { authorization: bot.token },
      body: { server_count: 7 },
    });
    expect(posted.status).toBe(200);
    const statsServer = await waitFor(
      () => otlp.spans.filter(isStats)[statsBefore],
      "the API's stats server span",
      30_000,
    );
    const limiter = await spanOf(
      statsServer.traceId,
      "the limiter",
      named("botdir-api", "redis.rate_limit", SPAN_KIND.client),
    );
    const write = await spanOf(
      statsServer.traceId,
      "the stats statement",
      named("botdir-api", "pg.write_stats", SPAN_KIND.client),
    );
    expect(limiter.parentSpanId).toBe(statsServer.spanId);
    expect(write.parentSpanId).toBe(statsServer.spanId);

    const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
      headers: { authorization: bot.token },
    });
    expect((log.body as { attempts: { traceId: string }[] }).attempts[0]?.traceId).toBe(page.traceId);

    await waitFor(() => logLines(stack.dispatcher, page.traceId).length > 0, "the dispatcher's log line");
    expect(logLines(stack.ingest, page.traceId).map((l) => l.msg)).toContain("request");
    expect(logLines(stack.api, page.traceId)).toEqual([]);
    expect(logLines(stack.api, apiServer.traceId).map((l) => l.route)).toContain("/api/v1/bots/:id/check");
    expect(logLines(stack.dispatcher, page.traceId).map((l) => l.msg)).toContain("webhook delivered");
    expect(otlp.rejected).toBe(0);
  }, 120_000);

  it("when the first attempt is answered 500, then its retry is in the same trace, and both requests carry its id", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/retry"));
    const page = frontendTrace();
    expect((await voteUnder(stack, bot.id, page.traceparent)).status).toBe(201);
    await waitFor(
      async () => (await stack.deliveries(bot.id))[0]?.state === "delivered",
      "the retry",
      30_000,
    );
    const received = stack.receiver.forPath("/retry");
    expect(received.map((r) => r.headers["x-webhook-trace"])).toEqual([page.traceId, page.traceId]);

    const { publish } = await expectVoteTrace(page.traceId, page.spanId);
    const posts = await waitFor(() => {
      const found = otlp
        .trace(page.traceId)
        .filter(named("botdir-webhook-dispatcher", "POST", SPAN_KIND.client));
      return found.length === 2 ? found : null;
    }, "both attempts' POST spans");
    expect(posts.map((p) => p.attributes["http.response.status_code"]).sort()).toEqual([204, 500]);
    expect(posts.find((p) => p.attributes["botdir.attempt"] === 1)?.attributes["error.type"]).toBe(
      "http_status",
    );
    // Each attempt's consumer span continues the hand-off the job carries.
    const consumers = otlp
      .trace(page.traceId)
      .filter(named("botdir-webhook-dispatcher", "webhook-deliveries process"));
    expect(consumers.length).toBe(2);
    expect(consumers.every((c) => c.parentSpanId === publish.spanId)).toBe(true);

    const [delivery] = await stack.deliveries(bot.id);
    const attempts = await stack.attempts(delivery!.id);
    expect(attempts.map((a) => a.traceId)).toEqual([page.traceId, page.traceId]);
  }, 120_000);

  it("when votes are handed off together in a vote.batch job, then its consumer span links to each vote's context, and each vote's attempt is in the vote's own trace", async () => {
    // Votes share a vote.batch job when their casts commit in one event-loop turn of vote-ingest;
    // on a loaded machine 8 concurrent casts can each land in a turn of their own, so rounds of 8
    // are cast until one round's deliveries show batch items (each round waits for its own spans).
    // One bot per vote: a bot's webhook takes 4 attempts at once (fairness), and an item over the cap
    // would leave the batch for a job of its own.
    const batchedRound = async () => {
      const pages = Array.from({ length: 8 }, frontendTrace);
      const bots = await Promise.all(
        pages.map((_, i) => stack.webhookBot(stack.receiver.url(`/batch/${i}`))),
      );
      const answers = await Promise.all(
        pages.map((page, i) => voteUnder(stack, bots[i]!.id, page.traceparent)),
      );
      expect(answers.map((a) => a.status)).toEqual(pages.map(() => 201));
      const traces = new Set(pages.map((p) => p.traceId));
      const received = () =>
        stack.receiver.requests.filter((r) => traces.has(String(r.headers["x-webhook-trace"])));
      await waitFor(
        () => received().length === pages.length,
        "every vote's webhook, under its trace",
        30_000,
      );
      expect(new Set(received().map((r) => r.headers["x-webhook-trace"]))).toEqual(traces);
      // Each vote's delivery ran as a batch item (webhook.deliver) or in a job of its own.
      const handledAs = (traceId: string) =>
        otlp.spans.find(
          (s) =>
            s.traceId === traceId &&
            (s.name === "webhook.deliver" ||
              (s.name === "webhook-deliveries process" && s.parentSpanId !== "")),
        )?.name;
      await waitFor(() => pages.every((p) => handledAs(p.traceId)), "each vote's delivery span", 30_000);
      const items = pages.filter((p) => handledAs(p.traceId) === "webhook.deliver");
      return items.length > 0 ? new Set(items.map((p) => p.traceId)) : undefined;
    };
    let traces: Set<string> | undefined;
    for (let round = 0; round < 5 && !traces; round++) traces = await batchedRound();
    if (!traces) throw new Error("no vote.batch job in 5 rounds of 8 concurrent votes");
    const batched = traces;

    const batch = await waitFor(
      () =>
        otlp.spans.find(
          (s) =>
            s.name === "webhook-deliveries process" &&
            s.parentSpanId === "" &&
            s.links.some((l) => batched.has(l.traceId)),
        ),
      "a vote.batch consumer span linked to these votes",
    );
    expect(batch.links.length).toBeGreaterThanOrEqual(2);
    for (const link of batch.links) {
      // The link is to the vote's hand-off; the item's work is that vote's trace, linked back.
      const publish = await spanOf(
        link.traceId,
        "the hand-off",
        named("botdir-vote-ingest", "webhook-deliveries publish"),
      );
      expect(link.spanId).toBe(publish.spanId);
      const item = await spanOf(
        link.traceId,
        "the batch item",
        named("botdir-webhook-dispatcher", "webhook.deliver"),
      );
      expect(item.parentSpanId).toBe(publish.spanId);
      expect(item.links).toEqual([{ traceId: batch.traceId, spanId: batch.spanId }]);
      const post = await spanOf(link.traceId, "the item's POST", named("botdir-webhook-dispatcher", "POST"));
      const claim = await spanOf(
        link.traceId,
        "the item's claim",
        named("botdir-webhook-dispatcher", "webhook.claim"),
      );
      expect(post.parentSpanId).toBe(item.spanId);
      expect(claim.parentSpanId).toBe(item.spanId);
    }
  }, 120_000);

  it("when the operator sends a test event, then it carries the request's trace id, which the delivery log shows", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/test-event"));
    const page = frontendTrace();
    const sent = await call(`${stack.ingest.base}/internal/v1/bots/${bot.id}/webhook/test`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey, traceparent: page.traceparent },
    });
    expect(sent.body).toMatchObject({ delivered: true, statusCode: 204 });
    expect(stack.receiver.forPath("/test-event")[0]?.headers["x-webhook-trace"]).toBe(page.traceId);
    const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
      headers: { authorization: bot.token },
    });
    expect((log.body as { attempts: { test: boolean; traceId: string }[] }).attempts).toEqual([
      expect.objectContaining({ test: true, traceId: page.traceId }),
    ]);
  }, 60_000);

  it("when the owner redelivers a delivery, then its attempts are in a new trace linked to the vote's", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/redeliver"));
    const page = frontendTrace();
    expect((await voteUnder(stack, bot.id, page.traceparent)).status).toBe(201);
    await waitFor(
      async () => (await stack.deliveries(bot.id))[0]?.state === "delivered",
      "the first delivery",
    );
    const { server } = await expectVoteTrace(page.traceId, page.spanId);
    const [delivery] = await stack.deliveries(bot.id);

    const auth = { authorization: bot.token };
    const url = `${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries/${delivery!.id}/redeliver`;
    expect((await call(url, { method: "POST", headers: auth })).status).toBe(202);
    await waitFor(() => stack.receiver.forPath("/redeliver").length === 2, "the redelivered attempt", 30_000);
    const newTrace = stack.receiver.forPath("/redeliver")[1]?.headers["x-webhook-trace"] as string;
    expect(newTrace).toMatch(/^[0-9a-f]{32}$/);
    expect(newTrace).not.toBe(page.traceId);

    const redeliver = await spanOf(newTrace, "the redelivery", named("botdir-api", "webhook.redeliver"));
    expect(redeliver.links).toEqual([{ traceId: page.traceId, spanId: server.spanId }]);
    // The relay's hand-off of the new series continues the context the row now keeps.
    const publish = await spanOf(
      newTrace,
      "the relay's hand-off",
      named("botdir-vote-ingest", "webhook-deliveries publish"),
    );
    expect(publish.parentSpanId).toBe(redeliver.spanId);
    await spanOf(
      newTrace,
      "the redelivered POST",
      named("botdir-webhook-dispatcher", "POST", SPAN_KIND.client),
    );

    const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, { headers: auth });
    const attempts = (log.body as { attempts: { series: number; traceId: string }[] }).attempts;
    expect(attempts.map((a) => [a.series, a.traceId])).toEqual([
      [1, newTrace],
      [0, page.traceId],
    ]);
  }, 120_000);

  it("when the operator redelivers with botctl, then its attempts are in a new trace, linked to the vote's, which botctl exported", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/botctl"));
    const page = frontendTrace();
    expect((await voteUnder(stack, bot.id, page.traceparent)).status).toBe(201);
    await waitFor(
      async () => (await stack.deliveries(bot.id))[0]?.state === "delivered",
      "the first delivery",
    );
    const { server } = await expectVoteTrace(page.traceId, page.spanId);
    const [delivery] = await stack.deliveries(bot.id);

    // The production bundle of botctl, with the apps' environment (its OTEL_* variables included).
    const { stdout } = await run(
      process.execPath,
      [path.join(REPO_ROOT, "apps/vote-ingest/dist/botctl.js"), "webhook", "redeliver", bot.id, delivery!.id],
      { env: { ...baseEnv(), ...stack.env } },
    );
    expect(JSON.parse(stdout)).toEqual({ deliveryId: delivery!.id, state: "pending", series: 1 });
    await waitFor(() => stack.receiver.forPath("/botctl").length === 2, "the redelivered attempt", 30_000);
    const newTrace = stack.receiver.forPath("/botctl")[1]?.headers["x-webhook-trace"] as string;
    expect(newTrace).toMatch(/^[0-9a-f]{32}$/);
    expect(newTrace).not.toBe(page.traceId);

    const redeliver = await spanOf(
      newTrace,
      "botctl's redelivery",
      named("botdir-botctl", "webhook.redeliver"),
    );
    expect(redeliver.links).toEqual([{ traceId: page.traceId, spanId: server.spanId }]);
    const botctlPublish = await spanOf(
      newTrace,
      "botctl's hand-off",
      named("botdir-botctl", "webhook-deliveries publish", SPAN_KIND.producer),
    );
    expect(botctlPublish.parentSpanId).toBe(redeliver.spanId);
    const consumer = await spanOf(
      newTrace,
      "the dispatcher's consumer span",
      named("botdir-webhook-dispatcher", "webhook-deliveries process", SPAN_KIND.consumer),
    );
    // The job the dispatcher ran is botctl's, or the relay's when its tick saw the due row first
    // (botctl's add is then deduplicated by the job id): either hand-off continues the context
    // the redelivery stored on the row, so it is a child of botctl's redelivery span.
    const publish = await spanOf(
      newTrace,
      "the hand-off the dispatcher ran",
      (s) => s.spanId === consumer.parentSpanId,
    );
    expect(publish).toMatchObject({ name: "webhook-deliveries publish", kind: SPAN_KIND.producer });
    expect(publish.parentSpanId).toBe(redeliver.spanId);

    const auth = { authorization: bot.token };
    const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, { headers: auth });
    const attempts = (log.body as { attempts: { series: number; traceId: string }[] }).attempts;
    expect(attempts.map((a) => [a.series, a.traceId])).toEqual([
      [1, newTrace],
      [0, page.traceId],
    ]);
  }, 120_000);
});

describe("traces across a Redis outage", () => {
  const stack = useStack({ dist: true, privateRedis: true, env: tracedEnv() });

  it("when a vote is cast while Redis is down, then the relay's later hand-off continues the vote's trace", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/outage"));
    const page = frontendTrace();
    await stack.redis.kill();
    try {
      expect((await voteUnder(stack, bot.id, page.traceparent)).status).toBe(201);
      const failed = await spanOf(
        page.traceId,
        "the failed hand-off",
        named("botdir-vote-ingest", "webhook-deliveries publish"),
      );
      expect(failed.attributes["error.type"]).toBe("queue_unavailable");
      expect(logLines(stack.ingest, page.traceId).map((l) => l.msg)).toContain(
        "queue unavailable; the outbox relay will hand off",
      );
    } finally {
      await stack.redis.restart();
    }
    await waitFor(() => stack.receiver.forPath("/outage").length > 0, "the relayed webhook", 60_000);
    expect(stack.receiver.forPath("/outage")[0]?.headers["x-webhook-trace"]).toBe(page.traceId);

    const server = await spanOf(
      page.traceId,
      "vote-ingest's server span",
      named("botdir-vote-ingest", "POST /internal/v1/votes"),
    );
    const consumer = await spanOf(
      page.traceId,
      "the consumer span",
      named("botdir-webhook-dispatcher", "webhook-deliveries process"),
    );
    // vote-ingest and the dispatcher export on timers of their own: the relay's publish span may
    // arrive after the consumer span that is its child.
    const relayed = await spanOf(
      page.traceId,
      "the relay's hand-off",
      (s) =>
        named("botdir-vote-ingest", "webhook-deliveries publish")(s) && s.spanId === consumer.parentSpanId,
    );
    const publishes = otlp
      .trace(page.traceId)
      .filter(named("botdir-vote-ingest", "webhook-deliveries publish"));
    expect(relayed.attributes["error.type"]).toBeUndefined();
    // Both hand-offs are children of the vote's request: the relay continued the row's context.
    expect(publishes.every((p) => p.parentSpanId === server.spanId)).toBe(true);
  }, 180_000);
});

describe("trace ids with tracing off", () => {
  // No endpoint: nothing is recorded or exported, and the dispatcher makes no span for a delivery.
  const stack = useStack({
    dist: true,
    env: { LOG_LEVEL: "info" },
    // /off-retry: the first attempt is answered 500, the next 204.
    reply: (req, n) => ({ status: req.path === "/off-retry" && n === 1 ? 500 : 204 }),
  });

  it("when a vote is cast without a traceparent with nothing exported, then no context is stored and its trace is the one its delivery id names: both attempts of a retried delivery, the delivery log and the dispatcher's lines carry the id's hex digits", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/off-retry"));
    const cast = await call(`${stack.ingest.base}/internal/v1/votes`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey },
      body: { bot_id: bot.id, user_id: randomUserId() },
    });
    expect(cast.status).toBe(201);
    const delivery = await waitFor(
      async () => {
        const [d] = await stack.deliveries(bot.id);
        return d?.state === "delivered" ? d : null;
      },
      "the retried delivery",
      30_000,
    );
    expect(delivery.traceparent).toBeNull();
    const traceId = delivery.id.replaceAll("-", "");
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);

    const received = stack.receiver.forPath("/off-retry");
    expect(received.map((r) => r.headers["x-webhook-trace"])).toEqual([traceId, traceId]);
    expect((await stack.attempts(delivery.id)).map((a) => a.traceId)).toEqual([traceId, traceId]);
    const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
      headers: { authorization: bot.token },
    });
    const shown = (log.body as { attempts: { deliveryId: string; traceId: string }[] }).attempts;
    expect(shown.map((a) => [a.deliveryId, a.traceId])).toEqual([
      [delivery.id, traceId],
      [delivery.id, traceId],
    ]);
    const lines = await waitFor(() => {
      const msgs = logLines(stack.dispatcher, traceId).map((l) => l.msg);
      return msgs.includes("webhook delivered") ? msgs : null;
    }, `the dispatcher's "webhook delivered" line with trace ${traceId}`);
    expect(lines).toContain("webhook attempt failed; will retry");
    // vote-ingest made no ids for the vote: its request line carries none.
    expect(logLines(stack.ingest, traceId)).toEqual([]);
  }, 120_000);

  it("when votes are cast under the site's traceparents with nothing exported, then each webhook, its delivery log entry and the dispatcher's and vote-ingest's log lines carry its vote's trace id", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/off"));
    // Cast together, so that some are handed off in one vote.batch job (each item keeps its own id).
    const pages = Array.from({ length: 8 }, frontendTrace);
    const answers = await Promise.all(pages.map((page) => voteUnder(stack, bot.id, page.traceparent)));
    expect(answers.map((a) => a.status)).toEqual(pages.map(() => 201));
    const received = await waitFor(() => {
      const got = stack.receiver.forPath("/off");
      return got.length === pages.length ? got : null;
    }, "the eight webhooks");
    expect(new Set(received.map((r) => r.headers["x-webhook-trace"]))).toEqual(
      new Set(pages.map((p) => p.traceId)),
    );

    // A webhook is received before its attempt is recorded (the dispatcher records it once the
    // receiver has answered): the log is read until it holds all eight.
    const attempts = await waitFor(async () => {
      const log = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
        headers: { authorization: bot.token },
      });
      const shown = (log.body as { attempts?: { traceId: string }[] }).attempts ?? [];
      return shown.length >= pages.length ? shown : null;
    }, "the eight attempts in the delivery log");
    expect(attempts).toHaveLength(pages.length);
    expect(new Set(attempts.map((a) => a.traceId))).toEqual(new Set(pages.map((p) => p.traceId)));

    for (const page of pages) {
      await waitFor(
        () => logLines(stack.dispatcher, page.traceId).some((l) => l.msg === "webhook delivered"),
        `the dispatcher's "webhook delivered" line with trace ${page.traceId}`,
      );
      expect(logLines(stack.ingest, page.traceId).map((l) => l.msg)).toContain("request");
    }
    // Each line names its own vote's trace: one delivered line per trace id, no other trace id.
    const delivered = stack.dispatcher
      .output()
      .split("\n")
      .filter((line) => line.includes('"webhook delivered"') && line.includes(bot.id))
      .map((line) => (JSON.parse(line) as { trace_id?: string }).trace_id);
    expect(delivered.sort()).toEqual(pages.map((p) => p.traceId).sort());
  }, 120_000);
});
