/**
 * verifyWebhook against the dispatcher's own signing code (@botdir/signing): the same key
 * derivation, both header schemes, and one test per refusal reason.
 */
import { sign, standardHeaders } from "@botdir/signing";
import { WebhookVerificationError, type WebhookVerificationReason } from "./errors.js";
import { verifyWebhook } from "./webhook.js";

const SECRET = `whsec_${"ab12".repeat(16)}`; // as issued: whsec_ + 64 hex characters
const OLD_SECRET = `whsec_${"cd34".repeat(16)}`;
const ID = "0b7c9e2e-4c1a-4f0e-9a51-3d2f8f1c6a10";
const BODY =
  '{"event":"vote.create","bot_id":"123456789012345678","user_id":"223456789012345678","voted_at":"2026-11-21T12:00:00.000Z"}';
const NOW = new Date("2026-11-21T12:00:05.000Z");

const standard = (secrets: string[], body = BODY, at = NOW) => standardHeaders(secrets, ID, at, body);
const legacy = (secret: string, body = BODY) => ({
  authorization: secret,
  "x-webhook-delivery": ID,
  "x-webhook-signature-256": sign(secret, body),
});

async function reasonOf(promise: Promise<unknown>): Promise<WebhookVerificationReason> {
  const error = await promise.then(
    () => new Error("verified"),
    (e: unknown) => e,
  );
  if (!(error instanceof WebhookVerificationError)) throw error;
  return error.reason;
}

describe("verifyWebhook", () => {
  it("when the dispatcher's Standard Webhooks headers come with the raw body, then the event and delivery id", async () => {
    const verified = await verifyWebhook({
      body: BODY,
      headers: standard([SECRET]),
      secret: SECRET,
      now: NOW,
    });
    expect(verified).toEqual({ deliveryId: ID, scheme: "standard", event: JSON.parse(BODY), traceId: null });
    const asBytes = await verifyWebhook({
      body: Buffer.from(BODY),
      headers: new Headers(standard([SECRET])),
      secret: SECRET,
      now: NOW,
    });
    expect(asBytes.deliveryId).toBe(ID);
  });

  it("when a secret is not base64 after whsec_, then the key is its UTF-8 bytes, as the dispatcher derives it", async () => {
    for (const secret of ["whsec_example_receiver", "plain secret!", "whsec_"]) {
      const verified = await verifyWebhook({ body: BODY, headers: standard([secret]), secret, now: NOW });
      expect(verified.scheme).toBe("standard");
    }
  });

  it("when a rotation signs with two secrets, then a receiver holding either one accepts", async () => {
    const headers = standard([SECRET, OLD_SECRET]);
    expect(headers["webhook-signature"].split(" ")).toHaveLength(2);
    for (const secret of [SECRET, OLD_SECRET, [OLD_SECRET, SECRET]]) {
      expect((await verifyWebhook({ body: BODY, headers, secret, now: NOW })).deliveryId).toBe(ID);
    }
    expect(await reasonOf(verifyWebhook({ body: BODY, headers, secret: "whsec_other", now: NOW }))).toBe(
      "invalid_signature",
    );
  });

  it("when one byte of the body changed, then invalid_signature", async () => {
    const headers = standard([SECRET]);
    const tampered = BODY.replace("223456789012345678", "223456789012345679");
    expect(await reasonOf(verifyWebhook({ body: tampered, headers, secret: SECRET, now: NOW }))).toBe(
      "invalid_signature",
    );
  });

  it("when the timestamp is further than the tolerance, then timestamp_out_of_tolerance (either side)", async () => {
    const headers = standard([SECRET], BODY, new Date(NOW.getTime() - 301_000));
    expect(await reasonOf(verifyWebhook({ body: BODY, headers, secret: SECRET, now: NOW }))).toBe(
      "timestamp_out_of_tolerance",
    );
    const future = standard([SECRET], BODY, new Date(NOW.getTime() + 301_000));
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: future, secret: SECRET, now: NOW }))).toBe(
      "timestamp_out_of_tolerance",
    );
    const wider = await verifyWebhook({
      body: BODY,
      headers,
      secret: SECRET,
      now: NOW,
      toleranceSeconds: 400,
    });
    expect(wider.deliveryId).toBe(ID);
  });

  it("when a Standard header is missing or the timestamp is not seconds, then missing_signature or malformed_timestamp", async () => {
    const { "webhook-id": _id, ...noId } = standard([SECRET]);
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: noId, secret: SECRET, now: NOW }))).toBe(
      "missing_signature",
    );
    const isoTime = { ...standard([SECRET]), "webhook-timestamp": NOW.toISOString() };
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: isoTime, secret: SECRET, now: NOW }))).toBe(
      "malformed_timestamp",
    );
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: {}, secret: SECRET, now: NOW }))).toBe(
      "missing_signature",
    );
  });

  it("when only the legacy headers come, then X-Webhook-Signature-256 and Authorization decide", async () => {
    const verified = await verifyWebhook({
      body: BODY,
      headers: legacy(SECRET),
      secret: [OLD_SECRET, SECRET],
    });
    expect(verified).toEqual({ deliveryId: ID, scheme: "legacy", event: JSON.parse(BODY), traceId: null });
    const wrongAuth = { ...legacy(SECRET), authorization: OLD_SECRET };
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: wrongAuth, secret: SECRET }))).toBe(
      "invalid_authorization",
    );
    const tampered = BODY.replace("vote.create", "vote.creat3");
    expect(await reasonOf(verifyWebhook({ body: tampered, headers: legacy(SECRET), secret: SECRET }))).toBe(
      "invalid_signature",
    );
    expect(await reasonOf(verifyWebhook({ body: BODY, headers: legacy(SECRET), secret: OLD_SECRET }))).toBe(
      "invalid_signature",
    );
  });

  it("when Standard headers are present but wrong, then the legacy headers do not rescue the request", async () => {
    const headers = { ...legacy(SECRET), ...standard(["whsec_other"]) };
    expect(await reasonOf(verifyWebhook({ body: BODY, headers, secret: SECRET, now: NOW }))).toBe(
      "invalid_signature",
    );
  });

  it("when a correctly signed body is not a JSON event, then invalid_body", async () => {
    const body = "not json";
    expect(
      await reasonOf(verifyWebhook({ body, headers: standard([SECRET], body), secret: SECRET, now: NOW })),
    ).toBe("invalid_body");
  });

  it("when toleranceSeconds is not a finite number ≥ 0 (an unset variable: NaN), then a TypeError, never an open window", async () => {
    const old = standard([SECRET], BODY, new Date(NOW.getTime() - 3_600_000));
    for (const toleranceSeconds of [Number.NaN, Number.POSITIVE_INFINITY, -1, "300" as unknown as number]) {
      await expect(
        verifyWebhook({ body: BODY, headers: old, secret: SECRET, now: NOW, toleranceSeconds }),
      ).rejects.toThrow(TypeError);
      // Refused on the legacy scheme too: the option is wrong whatever the request.
      await expect(
        verifyWebhook({ body: BODY, headers: legacy(SECRET), secret: SECRET, toleranceSeconds }),
      ).rejects.toThrow(TypeError);
    }
    const exact = await verifyWebhook({
      body: BODY,
      headers: standard([SECRET]),
      secret: SECRET,
      now: NOW,
      toleranceSeconds: 0,
    });
    expect(exact.deliveryId).toBe(ID);
  });

  it("when X-Webhook-Trace carries a W3C trace id, then traceId is it; absent or not 32 lowercase hex, null", async () => {
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const at = (value?: string) =>
      verifyWebhook({
        body: BODY,
        headers:
          value === undefined ? standard([SECRET]) : { ...standard([SECRET]), "X-Webhook-Trace": value },
        secret: SECRET,
        now: NOW,
      }).then((v) => v.traceId);
    expect(await at(trace)).toBe(trace);
    expect(await at()).toBeNull();
    for (const bad of [
      trace.toUpperCase(),
      `${trace}0`,
      trace.slice(1),
      `00-${trace}-00f067aa0ba902b7-01`,
      "",
    ]) {
      expect(await at(bad)).toBeNull();
    }
    const viaLegacy = await verifyWebhook({
      body: BODY,
      headers: new Headers({ ...legacy(SECRET), "x-webhook-trace": trace }),
      secret: SECRET,
    });
    expect(viaLegacy.traceId).toBe(trace);
  });
});
