/**
 * A `vote.batch` job whose own span the sampler does not record (`parentbased_always_off`: a new
 * trace is never recorded) while spans are exported: its items, whose votes' traces are not sampled
 * either, carry each its vote's trace id in X-Webhook-Trace, the attempt's row and the log line,
 * not the id of the batch's unrecorded trace. (batch-traces.test.ts: the batch's span recorded.)
 */
import type { DispatcherHarness } from "./support.js";
import { expectOwnTraceIds, handOffTracedBatch, startExporting, startLoggedHarness } from "./traced-batch.js";

// Exporting (an endpoint is set), though nothing here is recorded: no export is ever sent.
const telemetry = startExporting("parentbased_always_off", "http://127.0.0.1:9");

let h: DispatcherHarness;
let lines: Record<string, unknown>[];
beforeAll(async () => {
  ({ h, lines } = await startLoggedHarness());
});
afterAll(async () => {
  await h.close();
  await telemetry.shutdown();
});

describe("a vote.batch job whose span is not recorded", () => {
  it("when it carries votes whose traces are not sampled, then each webhook, attempt and log line carries its vote's trace id", async () => {
    const receiver = await h.receiver();
    const votes = await handOffTracedBatch(h, receiver, "unrecorded", [false, false, false]);
    for (const vote of votes) await h.waitForState(vote.delivery.id, "delivered");
    await expectOwnTraceIds(h, receiver, "unrecorded", lines, votes);
  }, 60_000);
});
