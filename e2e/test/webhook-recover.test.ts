/**
 * Recovering undelivered votes with the real processes (apps from dist/) and @botdir/sdk: a webhook
 * disabled by a 410 strands one failed delivery and one vote without a delivery; recover is refused
 * while it is disabled; enable with recoverSince sends both (the failed one under its delivery id,
 * in a new trace), the delivery log marks the recovered attempts and the recovery's counts end
 * done. At scale, a dispatcher killed mid-recovery loses no vote and duplicates stay under 0.5 %.
 */
import { randomUserId } from "@botdir/db/testing";
import { ApiError, BotDirClient } from "@botdir/sdk";
import { call, waitFor } from "../src/processes.js";
import { useStack } from "../src/stack.js";

let status = 410;
const stack = useStack({
  dist: true,
  reply: (req) => ({ status: req.path === "/gone" ? status : 204 }),
});

function sdkOf(bot: { id: string; token: string | null }) {
  return new BotDirClient({
    baseUrl: stack.api.base,
    token: bot.token ?? "",
    botId: bot.id,
    retry: { baseDelayMs: 20, maxDelayMs: 100 },
  });
}

/** A recovery's state through the internal API (the public GET is rate limited: 60 a minute). */
async function stateOf(botId: string, recoveryId: string): Promise<string> {
  const got = await call(`${stack.ingest.base}/internal/v1/bots/${botId}/webhook/recoveries/${recoveryId}`, {
    headers: { authorization: stack.keys.internalKey },
  });
  return (got.body as { state: string }).state;
}

async function errorOf(promise: Promise<unknown>): Promise<ApiError> {
  const error = await promise.then(
    () => new Error("resolved"),
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw error;
  return error;
}

describe("recovering undelivered votes", () => {
  it("when a 410 disabled the webhook, then recover is refused until enabled, and enable with recoverSince sends the failed and the unqueued vote once each", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/gone"));
    const sdk = sdkOf(bot);
    const since = new Date(Date.now() - 60_000).toISOString();
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const [failed] = await waitFor(async () => {
      const rows = await stack.deliveries(bot.id);
      return rows[0]?.state === "failed" ? rows : null;
    }, "the 410 to disable the webhook");
    const [original] = await stack.attempts(failed!.id);
    // Recorded while disabled: no delivery at all.
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    expect(await stack.deliveries(bot.id)).toHaveLength(1);

    const refused = await errorOf(sdk.recover(since));
    expect([refused.status, refused.message]).toEqual([
      409,
      "The webhook is disabled; enable it first (recoverSince on enable does both).",
    ]);

    status = 204;
    const enabled = await call(`${stack.ingest.base}/internal/v1/bots/${bot.id}/webhook/enable`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey },
      body: { recoverSince: since },
    });
    expect(enabled.status).toBe(200);
    const { recovery } = enabled.body as { recovery: { recoveryId: string; queued: number } };
    expect(recovery.queued).toBe(2);

    await waitFor(
      async () => ((await stateOf(bot.id, recovery.recoveryId)) === "done" ? true : null),
      "the recovery to end",
    );
    expect(await sdk.recovery(recovery.recoveryId)).toMatchObject({
      queued: 2,
      delivered: 2,
      failed: 0,
      pending: 0,
    });
    const gone = stack.receiver.forPath("/gone");
    // The 410 attempt, then each vote once.
    expect(gone).toHaveLength(3);
    const ids = gone.slice(1).map((r) => r.headers["x-webhook-delivery"]);
    expect(new Set(ids).size).toBe(2);
    expect(ids).toContain(failed!.id);

    const log = await sdk.webhookDeliveries();
    const recovered = log.filter((a) => a.recovered);
    expect(recovered).toHaveLength(2);
    const again = recovered.find((a) => a.deliveryId === failed!.id);
    expect(again).toMatchObject({ series: 1, outcome: "delivered" });
    // A new trace, as a redelivery's.
    expect(again?.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(again?.traceId).not.toBe(original?.traceId);
    expect(log.find((a) => a.deliveryId === failed!.id && a.series === 0)?.recovered).toBe(false);
  });

  it("when a dispatcher is killed mid-recovery, then every vote arrives and duplicates stay under 0.5 %", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/many"));
    const count = 1_000;
    const start = Date.now() - 3_600_000;
    // Votes recorded while the webhook was disabled: no delivery rows.
    await stack.db.prisma.vote.createMany({
      data: Array.from({ length: count }, (_, i) => ({
        botId: bot.id,
        userId: randomUserId(),
        votedAt: new Date(start + i),
      })),
    });
    const sdk = sdkOf(bot);
    const started = await sdk.recover(new Date(start - 1_000));
    expect(started.queued).toBe(count);

    await waitFor(() => stack.receiver.forPath("/many").length >= 100 || null, "the first recovered votes");
    await stack.dispatcher.kill();
    await stack.start("webhook-dispatcher");

    await waitFor(
      async () => ((await stateOf(bot.id, started.recoveryId)) === "done" ? true : null),
      "the recovery to end after the restart",
      120_000,
    );
    const received = stack.receiver.forPath("/many").map((r) => String(r.headers["x-webhook-delivery"]));
    const distinct = new Set(received);
    expect(distinct.size).toBe(count);
    expect(received.length - distinct.size).toBeLessThan(count * 0.005);
    expect(await sdk.recovery(started.recoveryId)).toMatchObject({
      queued: count,
      delivered: count,
      failed: 0,
    });
  }, 180_000);
});
