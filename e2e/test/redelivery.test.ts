/**
 * Manual redelivery across the real processes: a vote's delivery fails its five attempts against a
 * loopback receiver; the owner lists the attempts and redelivers it with the bot token on the
 * public API; vote-ingest's outbox relay hands the fresh series to the dispatcher, which reaches
 * the (now healthy) receiver with the same delivery id and the same body bytes. A delivery whose
 * attempt is in flight gets 409 from both the owner's and the operator's endpoint.
 */
import { randomUserId } from "@botdir/db/testing";
import { call, waitFor } from "../src/processes.js";
import { useStack } from "../src/stack.js";

/** The receiver answers 500 until a test makes it healthy. */
let healthy = false;
const stack = useStack({
  privateRedis: true,
  reply: (req) => (req.path === "/hang" ? "hang" : { status: healthy ? 204 : 500 }),
});

async function stateOf(botId: string) {
  const [delivery] = await stack.deliveries(botId);
  return delivery;
}

describe("redelivery with real processes", () => {
  it("when the owner redelivers a failed delivery, then the receiver gets the same id and bytes, and the log shows both series", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/owner"));
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const failed = await waitFor(
      async () => ((await stateOf(bot.id))?.state === "failed" ? stateOf(bot.id) : null),
      "the delivery to fail",
      30_000,
    );
    const deliveryId = failed!.id;
    const firstSeries = stack.receiver.forPath("/owner");
    expect(firstSeries).toHaveLength(5);

    const auth = { authorization: bot.token };
    const listed = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
      headers: auth,
    });
    expect(listed.status).toBe(200);
    const attempts = (listed.body as { attempts: { outcome: string; deliveryState: string }[] }).attempts;
    expect(attempts).toHaveLength(5);
    expect(attempts.every((a) => a.outcome === "failed" && a.deliveryState === "failed")).toBe(true);

    healthy = true;
    const url = `${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries/${deliveryId}/redeliver`;
    const redelivered = await call(url, { method: "POST", headers: auth });
    expect(redelivered.status).toBe(202);
    expect(redelivered.body).toEqual({ deliveryId, state: "pending", series: 1 });

    await waitFor(async () => (await stateOf(bot.id))?.state === "delivered", "the redelivery", 30_000);
    const all = stack.receiver.forPath("/owner");
    expect(all).toHaveLength(6);
    expect(all[5]?.headers["x-webhook-delivery"]).toBe(deliveryId);
    expect(all[5]?.body.equals(firstSeries[0]!.body)).toBe(true);
    // Tracing is off here (no OTEL endpoint), yet every request names its trace: the vote's for its
    // five attempts, a new one for the redelivered series (docs/tracing.md).
    const traces = all.map((r) => r.headers["x-webhook-trace"]);
    expect(traces[0]).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(traces.slice(0, 5))).toEqual(new Set([traces[0]]));
    expect(traces[5]).toMatch(/^[0-9a-f]{32}$/);
    expect(traces[5]).not.toBe(traces[0]);

    const after = await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, { headers: auth });
    const newest = (after.body as { attempts: Record<string, unknown>[] }).attempts[0];
    expect(newest).toMatchObject({
      deliveryId,
      series: 1,
      attempt: 1,
      statusCode: 204,
      outcome: "delivered",
    });
  }, 90_000);

  it("when an attempt is in flight (the delivery is pending), then both the owner and the operator get 409", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/hang"));
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    // The receiver holds the request: the attempt is in flight until the 2 s timeout.
    await waitFor(async () => stack.receiver.forPath("/hang").length > 0, "the first attempt", 10_000);
    const delivery = await stateOf(bot.id);
    expect(delivery?.state).toBe("pending");
    const path = `/bots/${bot.id}/webhook/deliveries/${delivery?.id}/redeliver`;
    const owner = await call(`${stack.api.base}/api/v1${path}`, {
      method: "POST",
      headers: { authorization: bot.token },
    });
    const operator = await call(`${stack.ingest.base}/internal/v1${path}`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey },
    });
    expect(owner.status).toBe(409);
    expect(operator.status).toBe(409);
    expect((await stateOf(bot.id))?.series).toBe(0);
  }, 30_000);
});
