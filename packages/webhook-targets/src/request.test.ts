import { verify, verifyStandard } from "@botdir/signing";
import { signedWebhookRequest } from "./request.js";

const signedAt = new Date("2026-11-21T09:15:31.000Z");
const payload = { event: "vote.create", bot_id: "123456789012345678", user_id: "2", voted_at: "x" };
const request = (previousSecret: string | null) =>
  signedWebhookRequest(payload, { id: "d-1", secret: "whsec_current", previousSecret, signedAt });
/** The Standard Webhooks headers as verifyStandard takes them. */
const standard = (headers: Record<string, string>) => ({
  id: headers["webhook-id"],
  timestamp: headers["webhook-timestamp"],
  signature: headers["webhook-signature"],
});

describe("signedWebhookRequest", () => {
  it("when a payload is signed, then the body is its JSON and the headers name the event, the id and the secret", () => {
    const { body, headers } = request(null);
    expect(JSON.parse(body.toString("utf8"))).toEqual(payload);
    expect(headers).toMatchObject({
      "Content-Type": "application/json",
      "User-Agent": "BotDirectory-Webhook/1",
      Authorization: "whsec_current",
      "X-Webhook-Event": "vote.create",
      "X-Webhook-Delivery": "d-1",
      "webhook-id": "d-1",
      "webhook-timestamp": String(signedAt.getTime() / 1000),
    });
  });

  it("when the body bytes are checked, then both signatures verify under the current secret", () => {
    const { body, headers } = request(null);
    expect(verify("whsec_current", body, headers["X-Webhook-Signature-256"])).toBe(true);
    expect(verifyStandard("whsec_current", body, standard(headers), { now: signedAt })).toBe(true);
    expect(headers["webhook-signature"]?.split(" ")).toHaveLength(1);
  });

  it("when a previous secret is in its overlap, then it signs webhook-signature too, and only the current one signs the rest", () => {
    const { body, headers } = request("whsec_previous");
    expect(headers["webhook-signature"]?.split(" ")).toHaveLength(2);
    expect(verifyStandard("whsec_previous", body, standard(headers), { now: signedAt })).toBe(true);
    expect(verifyStandard("whsec_current", body, standard(headers), { now: signedAt })).toBe(true);
    expect(headers.Authorization).toBe("whsec_current");
    expect(verify("whsec_previous", body, headers["X-Webhook-Signature-256"])).toBe(false);
  });
});

describe("X-Webhook-Trace", () => {
  const traced = (traceId: string | null | undefined) =>
    signedWebhookRequest(payload, { id: "d-1", secret: "s", previousSecret: null, signedAt, traceId })
      .headers;

  it("when the request has a trace id, then it carries it, and the signature is that of the body alone", () => {
    const headers = traced("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(headers["X-Webhook-Trace"]).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(headers["X-Webhook-Signature-256"]).toBe(traced(null)["X-Webhook-Signature-256"]);
    expect(Object.keys(headers).some((name) => name.toLowerCase() === "traceparent")).toBe(false);
  });

  it("when there is no trace id, or not one of 32 lowercase hex characters, then there is no header", () => {
    for (const id of [
      null,
      undefined,
      "",
      "4BF92F3577B34DA6A3CE929D0E0E4736",
      "00000000000000000000000000000000",
      "abc",
    ]) {
      expect(traced(id)["X-Webhook-Trace"]).toBeUndefined();
    }
  });
});
