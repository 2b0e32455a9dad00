/**
 * A `vote.batch` job whose own span the sampler does not record (`parentbased_always_off`: a new
 * trace is never recorded) while spans are exported: its items, whose votes' traces are not sampled
 * either, carry each its vote's trace id in X-Webhook-Trace, the attempt's row and the log line,
 * not the id of the batch's unrecorded trace. (batch-traces.test.ts: the batch's span recorded.)
 */
import { randomBytes } from "node:crypto";
import { loggerOptions, startTelemetry } from "@botdir/service-kit";
import { pino } from "pino";
import { type DispatcherHarness, startDispatcherHarness } from "./support.js";

// Exporting (an endpoint is set), though nothing here is recorded: no export is ever sent.
const telemetry = startTelemetry(
  {
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9",
    OTEL_TRACES_SAMPLER: "parentbased_always_off",
    OTEL_TRACES_SAMPLER_ARG: 1,
    OTEL_SDK_DISABLED: false,
    OTEL_SERVICE_NAME: "botdir-webhook-dispatcher",
  },
  { exportThread: false },
);

const lines: Record<string, unknown>[] = [];
const logger = pino(loggerOptions("webhook-dispatcher", "info", { nodeEnv: "production", tty: false }), {
  write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>),
});

let h: DispatcherHarness;
beforeAll(async () => {
  h = await startDispatcherHarness({ workers: [{ concurrency: 4 }], logger });
});
afterAll(async () => {
  await h.close();
  await telemetry.shutdown();
});

describe("a vote.batch job whose span is not recorded", () => {
  it("when it carries votes whose traces are not sampled, then each webhook, attempt and log line carries its vote's trace id", async () => {
    const receiver = await h.receiver();
    const arranged = await Promise.all(
      Array.from({ length: 3 }, (_, i) => h.arrange(receiver.url(`/unrecorded/${i}`))),
    );
    const votes = arranged.map(({ delivery }) => {
      const traceId = randomBytes(16).toString("hex");
      return { delivery, traceId, traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-00` };
    });
    // Each delivery's row keeps its vote's context, as vote-ingest stores it (an attempt's trace id).
    for (const v of votes) {
      await h.db.prisma.delivery.update({
        where: { id: v.delivery.id },
        data: { traceparent: v.traceparent },
      });
    }
    await h.handOffBatch(
      votes.map((v) => ({ id: v.delivery.id, botId: v.delivery.botId, traceparent: v.traceparent })),
    );
    for (const [i, vote] of votes.entries()) {
      await h.waitForState(vote.delivery.id, "delivered");
      expect(receiver.forPath(`/unrecorded/${i}`).map((r) => r.headers["x-webhook-trace"])).toEqual([
        vote.traceId,
      ]);
      expect((await h.attempts(vote.delivery.id)).map((a) => a.traceId)).toEqual([vote.traceId]);
      const delivered = lines.filter(
        (l) => l.msg === "webhook delivered" && l.deliveryId === vote.delivery.id,
      );
      expect(delivered.map((l) => l.trace_id)).toEqual([vote.traceId]);
    }
  }, 60_000);
});
