/**
 * Issue 14: Standard Webhooks headers (checked with the real `standardwebhooks` package), a rotated
 * secret signing beside the new one during its overlap, and dead endpoints disabled after the window.
 */
import { ManualClock } from "@botdir/service-kit";
import { Webhook } from "standardwebhooks";
import type { AttemptOutcome, WebhookRequest } from "../src/http-client.js";
import { fail, ok, secretBox, useDeliveryDatabase } from "./support.js";

const DAY = 24 * 60 * 60 * 1000;
const t = useDeliveryDatabase();

/** A secret as botctl issues it. */
const issued = (n: number) => `whsec_${n.toString(16).padStart(2, "0").repeat(32)}`;

/** The handler with the dead-endpoint rule; `reply` is the outcome of every attempt (or makes it). */
function handler(clock: ManualClock, reply: AttemptOutcome | (() => Promise<AttemptOutcome>)) {
  const sent: WebhookRequest[] = [];
  const deliver = t.handler(clock, {
    send: async (request) => {
      sent.push(request);
      return typeof reply === "function" ? reply() : reply;
    },
    deadEndpoints: { afterMs: 5 * DAY, minDeliveries: 5 },
  });
  return { deliver, sent };
}

function verifyWith(secret: string, request: WebhookRequest) {
  return new Webhook(secret).verify(request.body.toString("utf8"), request.headers);
}

describe("Standard Webhooks headers", () => {
  it("when a vote is delivered, then webhook-id is the delivery id and the standardwebhooks package verifies it with the secret as shown", async () => {
    const clock = new ManualClock(new Date());
    const { bot, secret, newDelivery } = await t.webhookBot("https://example.test/hook", {
      secret: issued(1),
      clock,
    });
    const delivery = await newDelivery();
    const { deliver, sent } = handler(clock, ok);

    expect((await deliver({ deliveryId: delivery.id })).kind).toBe("delivered");

    const request = sent[0]!;
    expect(request.headers["webhook-id"]).toBe(delivery.id);
    expect(request.headers["webhook-id"]).toBe(request.headers["X-Webhook-Delivery"]);
    expect(request.headers["webhook-timestamp"]).toBe(String(Math.floor(clock.now().getTime() / 1000)));
    expect(request.headers.Authorization).toBe(secret);
    expect(verifyWith(secret, request)).toMatchObject({ event: "vote.create", bot_id: bot.id });
    expect(() => verifyWith(issued(2), request)).toThrow(/No matching signature/);
  });

  it("when a secret was rotated, then during the overlap both secrets verify and Authorization is the new one; after it only the new one", async () => {
    const clock = new ManualClock(new Date());
    const [previous, next] = [issued(3), issued(4)];
    const { bot, newDelivery } = await t.webhookBot("https://example.test/hook", { secret: next, clock });
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: {
        webhookPreviousSecretEncrypted: secretBox.encrypt(previous),
        webhookPreviousSecretUntil: new Date(clock.now().getTime() + DAY),
      },
    });
    const { deliver, sent } = handler(clock, ok);

    const during = await newDelivery();
    await deliver({ deliveryId: during.id });
    const overlap = sent[0]!;
    expect(String(overlap.headers["webhook-signature"]).split(" ")).toHaveLength(2);
    expect(() => verifyWith(next, overlap)).not.toThrow();
    expect(() => verifyWith(previous, overlap)).not.toThrow();
    expect(overlap.headers.Authorization).toBe(next);

    // The overlap ends (moved into the past, since the package checks timestamps against Date.now).
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookPreviousSecretUntil: new Date(clock.now().getTime() - 1) },
    });
    const after = await newDelivery();
    await deliver({ deliveryId: after.id });
    const single = sent[1]!;
    expect(String(single.headers["webhook-signature"]).split(" ")).toHaveLength(1);
    expect(() => verifyWith(next, single)).not.toThrow();
    expect(() => verifyWith(previous, single)).toThrow(/No matching signature/);
  });

  it("when a delivery is replayed outside the receiver's tolerance, then the package rejects it", async () => {
    const clock = new ManualClock(new Date(Date.now() - 10 * 60_000));
    const { secret, newDelivery } = await t.webhookBot("https://example.test/hook", {
      secret: issued(5),
      clock,
    });
    const delivery = await newDelivery();
    const { deliver, sent } = handler(clock, ok);
    await deliver({ deliveryId: delivery.id });
    expect(() => verifyWith(secret, sent[0]!)).toThrow(/too old/);
  });
});

describe("dead endpoints", () => {
  /** A bot with a webhook at example.test/`path` and the `n`th issued secret, a clock at now. */
  async function webhookBot(path: string, n: number) {
    const clock = new ManualClock(new Date());
    const { bot, newDelivery } = await t.webhookBot(`https://example.test/${path}`, {
      secret: issued(n),
      clock,
    });
    return {
      clock,
      bot,
      newDelivery,
      disabledAt: async () =>
        (await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } })).webhookDisabledAt,
    };
  }

  it("when every attempt failed for the whole window across five deliveries, then the webhook is disabled and its pending deliveries end failed", async () => {
    const { clock, bot, newDelivery, disabledAt } = await webhookBot("dead", 6);
    const { deliver, sent } = handler(clock, fail);

    const early = [];
    for (let i = 0; i < 5; i++) {
      const d = await newDelivery();
      early.push(d);
      expect((await deliver({ deliveryId: d.id })).kind).toBe("retry");
      clock.advance(DAY / 2);
    }
    // 2.5 days of failures: not yet.
    expect(await disabledAt()).toBeNull();

    clock.advance(3 * DAY);
    const last = await newDelivery();
    expect((await deliver({ deliveryId: last.id })).kind).toBe("failed");

    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(row.webhookDisabledAt?.toISOString()).toBe(clock.now().toISOString());
    expect(row.webhookDisabledReason).toBe("dead_endpoint");
    for (const d of [...early, last]) {
      const delivery = await t.row(d.id);
      expect([delivery.state, delivery.failureReason]).toEqual(["failed", "endpoint_disabled"]);
    }

    // A vote after disabling: its delivery ends without an attempt.
    const requestsBefore = sent.length;
    const later = await newDelivery();
    expect(await deliver({ deliveryId: later.id })).toEqual({ kind: "done", reason: "endpoint_disabled" });
    expect(sent.length).toBe(requestsBefore);
    expect((await t.row(later.id)).failureReason).toBe("endpoint_disabled");
  });

  it("when failures span the window but a delivery succeeded in between, then the webhook stays enabled", async () => {
    const { clock, newDelivery, disabledAt } = await webhookBot("flaky", 7);
    const failing = handler(clock, fail);
    for (let i = 0; i < 5; i++) {
      await failing.deliver({ deliveryId: (await newDelivery()).id });
      clock.advance(DAY / 2);
    }
    await handler(clock, ok).deliver({
      deliveryId: (await newDelivery()).id,
    });
    clock.advance(3 * DAY);
    const result = await failing.deliver({
      deliveryId: (await newDelivery()).id,
    });
    expect(result.kind).toBe("retry");
    expect(await disabledAt()).toBeNull();
  });

  it("when a disabled webhook is re-enabled and fails again, then it is disabled again only once the new streak spans the window", async () => {
    const { clock, bot, newDelivery, disabledAt } = await webhookBot("relapse", 9);
    const { deliver } = handler(clock, fail);
    const failOnce = async () => (await deliver({ deliveryId: (await newDelivery()).id })).kind;

    for (let i = 0; i < 6; i++) {
      await failOnce();
      clock.advance(DAY + DAY / 10);
    }
    expect(await disabledAt()).not.toBeNull();

    // The owner re-enables it (what the listing's enable does): the old streak no longer counts.
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookDisabledAt: null, webhookDisabledReason: null, webhookEnabledAt: clock.now() },
    });
    clock.advance(1_000);
    for (let i = 0; i < 5; i++) {
      expect(await failOnce()).toBe("retry");
      clock.advance(DAY / 2);
    }
    expect(await disabledAt()).toBeNull();

    clock.advance(3 * DAY);
    expect(await failOnce()).toBe("failed");
    expect((await disabledAt())?.toISOString()).toBe(clock.now().toISOString());
  });

  it("when fewer deliveries than the minimum failed, then the webhook stays enabled however long", async () => {
    const { clock, newDelivery, disabledAt } = await webhookBot("quiet", 8);
    const { deliver } = handler(clock, fail);
    for (let i = 0; i < 3; i++) {
      await deliver({ deliveryId: (await newDelivery()).id });
      clock.advance(4 * DAY);
    }
    expect(await disabledAt()).toBeNull();
  });

  const gone: AttemptOutcome = { ok: false, statusCode: 410, errorKind: "http_status", durationMs: 5 };

  it("when the receiver answers 410 Gone, then the webhook is disabled after that one attempt and its other pending deliveries end failed", async () => {
    const { clock, bot, newDelivery } = await webhookBot("gone", 10);
    const waiting = await newDelivery();
    const first = await newDelivery();
    const { deliver, sent } = handler(clock, gone);

    expect(await deliver({ deliveryId: first.id })).toEqual({
      kind: "failed",
      attemptNumber: 1,
      errorKind: "http_status",
    });
    expect(sent).toHaveLength(1);
    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect([row.webhookDisabledAt?.toISOString(), row.webhookDisabledReason]).toEqual([
      clock.now().toISOString(),
      "gone",
    ]);
    for (const d of [first, waiting]) {
      const delivery = await t.row(d.id);
      expect([delivery.state, delivery.failureReason]).toEqual(["failed", "endpoint_disabled"]);
    }
    expect(await deliver({ deliveryId: waiting.id })).toEqual({ kind: "done", reason: "failed" });
    expect(sent).toHaveLength(1);
  });

  it("when the receiver answers another 4xx such as 404, then the delivery is retried and the webhook stays enabled", async () => {
    const { clock, newDelivery, disabledAt } = await webhookBot("missing", 11);
    const { deliver } = handler(clock, { ...gone, statusCode: 404 });
    const result = await deliver({
      deliveryId: (await newDelivery()).id,
    });
    expect(result.kind).toBe("retry");
    expect(await disabledAt()).toBeNull();
  });

  it("when the owner set another URL after the attempt that got 410, then the new URL stays enabled", async () => {
    const { clock, bot, newDelivery, disabledAt } = await webhookBot("old", 12);
    const delivery = await newDelivery();
    const { deliver, sent } = handler(clock, async () => {
      // The owner moves the webhook while the attempt to the old URL is in flight.
      await t.db.prisma.bot.update({
        where: { id: bot.id },
        data: { webhookUrl: "https://example.test/new" },
      });
      return gone;
    });
    expect((await deliver({ deliveryId: delivery.id })).kind).toBe("retry");
    expect(sent).toHaveLength(1);
    expect(await disabledAt()).toBeNull();
  });
});
