/**
 * A `vote.batch` job where spans are exported and the sampler records new traces but follows a
 * vote's own decision (`parentbased_always_on`; OTLP JSON to a receiver in this test): the batch's
 * consumer span is recorded in a trace of its own, linked to every item; an item whose vote's trace
 * is not sampled (its traceparent's flags 00) makes no span, and its webhook (X-Webhook-Trace), its
 * attempt's row and its log line carry that vote's trace id, never the batch's; a sampled item's
 * attempt is in its vote's trace, linked back to the batch.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { waitFor } from "@botdir/service-kit/testing";
import type { DispatcherHarness } from "./support.js";
import { expectOwnTraceIds, handOffTracedBatch, startExporting, startLoggedHarness } from "./traced-batch.js";

interface Received {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  links: { traceId: string; spanId: string }[];
}

/** What the dispatcher exports, as OTLP JSON POSTed to /v1/traces: each span's ids, name and links. */
const spans: Received[] = [];
const otlp = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
      resourceSpans?: { scopeSpans?: { spans?: (Received & { parentSpanId?: string })[] }[] }[];
    };
    for (const rs of body.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? [])
        for (const s of ss.spans ?? [])
          spans.push({
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ?? "",
            name: s.name,
            links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
          });
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await new Promise<void>((resolve) => otlp.listen(0, "127.0.0.1", resolve));

const telemetry = startExporting(
  "parentbased_always_on",
  `http://127.0.0.1:${(otlp.address() as AddressInfo).port}`,
  { OTEL_EXPORTER_OTLP_PROTOCOL: "http/json", OTEL_BSP_SCHEDULE_DELAY: 100 },
);

let h: DispatcherHarness;
let lines: Record<string, unknown>[];
beforeAll(async () => {
  ({ h, lines } = await startLoggedHarness());
});
afterAll(async () => {
  await h.close();
  await telemetry.shutdown();
  await new Promise<void>((resolve) => otlp.close(() => resolve()));
});

describe("a vote.batch job's traces with spans exported", () => {
  it("when a recorded batch carries votes whose traces are not sampled, then each of their webhooks, attempts and log lines carries its vote's trace id and no span is recorded for them; a sampled vote's attempt is in its own trace, linked to the batch", async () => {
    const receiver = await h.receiver();
    // The site's contexts: the first three not sampled (flags 00), the last sampled.
    const votes = await handOffTracedBatch(h, receiver, "batch", [false, false, false, true]);
    const unsampled = votes.slice(0, 3);
    const sampled = votes[3]!;

    // The batch's span ends after its items: once it is received, so is every span they made.
    const batch = await waitFor(
      () =>
        spans.find(
          (s) =>
            s.name === "webhook-deliveries process" &&
            s.parentSpanId === "" &&
            s.links.some((l) => l.traceId === sampled.traceId),
        ),
      "the batch's consumer span",
    );
    expect(new Set(batch.links.map((l) => l.traceId))).toEqual(new Set(votes.map((v) => v.traceId)));
    expect(spans.filter((s) => s.traceId === batch.traceId).map((s) => s.name)).toEqual([
      "webhook-deliveries process",
    ]);

    for (const vote of votes) expect((await h.row(vote.delivery.id)).state).toBe("delivered");
    await expectOwnTraceIds(h, receiver, "batch", lines, votes);
    for (const vote of unsampled) expect(spans.filter((s) => s.traceId === vote.traceId)).toEqual([]);

    const item = spans.find((s) => s.traceId === sampled.traceId && s.name === "webhook.deliver");
    expect(item?.parentSpanId).toBe(sampled.spanId);
    expect(item?.links).toEqual([{ traceId: batch.traceId, spanId: batch.spanId }]);
    const below = spans.filter((s) => s.traceId === sampled.traceId && s.parentSpanId === item?.spanId);
    expect(below.map((s) => s.name).sort()).toEqual(["POST", "webhook.claim", "webhook.record"]);
  }, 60_000);
});
