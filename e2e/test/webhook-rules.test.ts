/**
 * Webhook rules through the real processes over real HTTP: votes cast on vote-ingest, delivered by
 * the webhook dispatcher. A webhook whose every attempt fails for WEBHOOK_DISABLE_AFTER_MS across
 * WEBHOOK_DISABLE_MIN_DELIVERIES deliveries is disabled and its pending deliveries end failed
 * (shortened here to 1 s and 2 deliveries); during a secret rotation's overlap every delivery is
 * signed with both the new and the previous secret.
 */
import { createHmac, randomBytes } from "node:crypto";
import { createSecretBox } from "@botdir/db";
import { randomUserId } from "@botdir/db/testing";
import { waitFor } from "../src/processes.js";
import { useStack } from "../src/stack.js";

const stack = useStack({
  privateRedis: true,
  replicas: { api: 0 },
  reply: (req) => (req.path === "/dead" ? { status: 500 } : { status: 204 }),
  env: {
    WEBHOOK_DISABLE_AFTER_MS: "1000",
    WEBHOOK_DISABLE_MIN_DELIVERIES: "2",
    // Five attempts over 2.8 s: the 1 s streak is reached while the deliveries still have attempts.
    WEBHOOK_RETRY_DELAYS_MS: "700,700,700,700",
  },
});

describe("a dead endpoint", () => {
  it("when every attempt to a webhook fails for WEBHOOK_DISABLE_AFTER_MS across enough deliveries, then the dispatcher disables it, ends its pending deliveries failed, and a later vote sends nothing", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/dead"));
    for (const user of [randomUserId(), randomUserId()]) {
      expect((await stack.vote(bot.id, user)).status).toBe(201);
    }

    const disabled = await waitFor(async () => {
      const row = await stack.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
      return row.webhookDisabledAt ? row : null;
    }, "the webhook to be disabled");
    expect(disabled.webhookDisabledReason).toBe("dead_endpoint");
    const ended = await waitFor(async () => {
      const rows = await stack.deliveries(bot.id);
      return rows.every((d) => d.state === "failed") ? rows : null;
    }, "both deliveries to end failed");
    // Disabled before the five attempts were used up: the rule ended them, not the retry budget.
    expect(ended.some((d) => d.failureReason === "endpoint_disabled" && d.attemptsMade < 5)).toBe(true);
    const requestsWhenDisabled = stack.receiver.forPath("/dead").length;
    expect(requestsWhenDisabled).toBeGreaterThanOrEqual(3);

    // A vote after that creates no delivery (vote-ingest skips a disabled webhook) and sends
    // nothing. Sentinel: a healthy bot's vote cast after it is delivered first.
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const healthy = await stack.webhookBot(stack.receiver.url("/alive"));
    expect((await stack.vote(healthy.id, randomUserId())).status).toBe(201);
    await waitFor(() => stack.receiver.forPath("/alive").length === 1, "the sentinel delivery");
    expect(await stack.deliveries(bot.id)).toHaveLength(2);
    expect(stack.receiver.forPath("/dead")).toHaveLength(requestsWhenDisabled);
  });
});

describe("a secret rotation", () => {
  it("when a bot's secret was rotated and the previous one is still in its overlap, then the dispatcher's delivery carries a Standard Webhooks signature under each secret, and only the new secret signs X-Webhook-Signature-256", async () => {
    const current = `whsec_${randomBytes(24).toString("base64")}`;
    const previous = `whsec_${randomBytes(24).toString("base64")}`;
    const bot = await stack.webhookBot(stack.receiver.url("/rotating"), current);
    await stack.db.prisma.bot.update({
      where: { id: bot.id },
      data: {
        webhookPreviousSecretEncrypted: createSecretBox(stack.keys.encryptionKey).encrypt(previous),
        webhookPreviousSecretUntil: new Date(Date.now() + 3_600_000),
      },
    });

    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const [request] = await waitFor(() => {
      const got = stack.receiver.forPath("/rotating");
      return got.length === 1 ? got : null;
    }, "the delivery");

    // Independent HMACs over the bytes received (Standard Webhooks: the key is the base64 after whsec_).
    const id = String(request!.headers["webhook-id"]);
    const timestamp = String(request!.headers["webhook-timestamp"]);
    const standard = (secret: string) =>
      `v1,${createHmac("sha256", Buffer.from(secret.slice("whsec_".length), "base64"))
        .update(`${id}.${timestamp}.`)
        .update(request!.body)
        .digest("base64")}`;
    const signatures = String(request!.headers["webhook-signature"]).split(" ");
    expect(signatures).toEqual([standard(current), standard(previous)]);
    const bodyOnly = (secret: string) =>
      `sha256=${createHmac("sha256", secret).update(request!.body).digest("hex")}`;
    expect(request!.headers["x-webhook-signature-256"]).toBe(bodyOnly(current));
    expect(request!.headers["x-webhook-signature-256"]).not.toBe(bodyOnly(previous));
  });

  it("when the previous secret's overlap has ended, then the delivery is signed with the new secret only", async () => {
    const current = `whsec_${randomBytes(24).toString("base64")}`;
    const previous = `whsec_${randomBytes(24).toString("base64")}`;
    const bot = await stack.webhookBot(stack.receiver.url("/rotated"), current);
    await stack.db.prisma.bot.update({
      where: { id: bot.id },
      data: {
        webhookPreviousSecretEncrypted: createSecretBox(stack.keys.encryptionKey).encrypt(previous),
        webhookPreviousSecretUntil: new Date(Date.now() - 1_000),
      },
    });

    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    const [request] = await waitFor(() => {
      const got = stack.receiver.forPath("/rotated");
      return got.length === 1 ? got : null;
    }, "the delivery");
    expect(String(request!.headers["webhook-signature"]).split(" ")).toHaveLength(1);
  });
});
