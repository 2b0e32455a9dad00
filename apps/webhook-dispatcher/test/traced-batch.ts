/**
 * Shared by the batch-traces tests (each file its own sampler: telemetry is one per process): the
 * dispatcher exporting spans, its log lines kept, and a `vote.batch` job of votes each under a
 * trace of the site's own.
 */
import { randomBytes } from "node:crypto";
import { loggerOptions, startTelemetry, type Telemetry, type TelemetryEnv } from "@botdir/service-kit";
import { pino } from "pino";
import {
  type DispatcherHarness,
  type Receiver,
  type SeededDelivery,
  startDispatcherHarness,
} from "./support.js";

/**
 * Telemetry exporting to `endpoint` with `sampler`, one export at a time from this thread (they
 * arrive in the order the spans ended).
 */
export function startExporting(
  sampler: TelemetryEnv["OTEL_TRACES_SAMPLER"],
  endpoint: string,
  more: Partial<TelemetryEnv> = {},
): Telemetry {
  return startTelemetry(
    {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_TRACES_SAMPLER: sampler,
      OTEL_TRACES_SAMPLER_ARG: 1,
      OTEL_SDK_DISABLED: false,
      OTEL_SERVICE_NAME: "botdir-webhook-dispatcher",
      ...more,
    },
    { exportThread: false },
  );
}

/** A dispatcher harness (four attempts at once) whose logger has the apps' options; its lines kept. */
export async function startLoggedHarness(): Promise<{
  h: DispatcherHarness;
  lines: Record<string, unknown>[];
}> {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(loggerOptions("webhook-dispatcher", "info", { nodeEnv: "production", tty: false }), {
    write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  return { h: await startDispatcherHarness({ workers: [{ concurrency: 4 }], logger }), lines };
}

export interface TracedVote {
  delivery: SeededDelivery;
  traceId: string;
  spanId: string;
  traceparent: string;
}

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

/**
 * One `vote.batch` job of a delivery per entry of `sampled`, to `receiver`'s `/<prefix>/<i>`,
 * each under a new trace of the site's (its flags 01 where sampled, else 00), which the delivery's
 * row keeps as vote-ingest stores it (an attempt's trace id).
 */
export async function handOffTracedBatch(
  h: DispatcherHarness,
  receiver: Receiver,
  prefix: string,
  sampled: boolean[],
): Promise<TracedVote[]> {
  const arranged = await Promise.all(sampled.map((_, i) => h.arrange(receiver.url(`/${prefix}/${i}`))));
  const votes = arranged.map(({ delivery }, i) => {
    const traceId = hex(16);
    const spanId = hex(8);
    return { delivery, traceId, spanId, traceparent: `00-${traceId}-${spanId}-${sampled[i] ? "01" : "00"}` };
  });
  for (const v of votes) {
    await h.db.prisma.delivery.update({ where: { id: v.delivery.id }, data: { traceparent: v.traceparent } });
  }
  await h.handOffBatch(
    votes.map((v) => ({ id: v.delivery.id, botId: v.delivery.botId, traceparent: v.traceparent })),
  );
  return votes;
}

/** Each vote's webhook (X-Webhook-Trace), attempt row and "webhook delivered" line carry its own trace id. */
export async function expectOwnTraceIds(
  h: DispatcherHarness,
  receiver: Receiver,
  prefix: string,
  lines: Record<string, unknown>[],
  votes: TracedVote[],
): Promise<void> {
  for (const [i, vote] of votes.entries()) {
    expect(receiver.forPath(`/${prefix}/${i}`).map((r) => r.headers["x-webhook-trace"])).toEqual([
      vote.traceId,
    ]);
    expect((await h.attempts(vote.delivery.id)).map((a) => a.traceId)).toEqual([vote.traceId]);
    const delivered = lines.filter((l) => l.msg === "webhook delivered" && l.deliveryId === vote.delivery.id);
    expect(delivered.map((l) => l.trace_id)).toEqual([vote.traceId]);
  }
}
