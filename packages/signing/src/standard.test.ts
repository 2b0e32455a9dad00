import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { standardHeaders, verifyStandard, webhookKey } from "./index.js";

/** A secret as issued: whsec_ + 64 hex characters (the format every stored secret has). */
const issued = () => `whsec_${randomBytes(32).toString("hex")}`;
const body = Buffer.from('{"event":"vote.create","bot_id":"123456789012345678","user_id":"1"}');
const id = "0b6e3b0e-3c1f-4c1d-9a53-5c6d3a0e9f11";

describe("Standard Webhooks signatures against the standardwebhooks package", () => {
  it("when one secret signs, then new Webhook(secret).verify accepts the delivery", () => {
    const secret = issued();
    const headers = standardHeaders([secret], id, new Date(), body);
    expect(new Webhook(secret).verify(body.toString(), headers)).toEqual(JSON.parse(body.toString()));
  });

  it("when a base64 secret (the specification's own format) signs, then the package accepts it", () => {
    const secret = `whsec_${randomBytes(24).toString("base64")}`;
    const headers = standardHeaders([secret], id, new Date(), body);
    expect(() => new Webhook(secret).verify(body.toString(), headers)).not.toThrow();
  });

  it("when more secrets have signed than keys are kept, then every secret still signs correctly", () => {
    // Key objects are kept per secret (bounded): the evicted and the kept ones must both be right.
    const first = issued();
    const check = (secret: string) =>
      expect(() =>
        new Webhook(secret).verify(body.toString(), standardHeaders([secret], id, new Date(), body)),
      ).not.toThrow();
    check(first);
    const others = Array.from({ length: 10_050 }, issued);
    for (const secret of others) standardHeaders([secret], id, new Date(), body);
    check(first); // evicted: made again
    check(others.at(-1) as string); // kept
  });

  it("when two secrets sign during an overlap, then a receiver holding either one accepts", () => {
    const [next, previous] = [issued(), issued()];
    const headers = standardHeaders([next, previous], id, new Date(), body);
    expect(headers["webhook-signature"].split(" ")).toHaveLength(2);
    expect(() => new Webhook(next).verify(body.toString(), headers)).not.toThrow();
    expect(() => new Webhook(previous).verify(body.toString(), headers)).not.toThrow();
  });

  it("when only the new secret signs after the overlap, then the previous secret is rejected", () => {
    const [next, previous] = [issued(), issued()];
    const headers = standardHeaders([next], id, new Date(), body);
    expect(() => new Webhook(next).verify(body.toString(), headers)).not.toThrow();
    expect(() => new Webhook(previous).verify(body.toString(), headers)).toThrow(/No matching signature/);
  });

  it("when a captured delivery is replayed outside the tolerance, then it is rejected", () => {
    const secret = issued();
    const headers = standardHeaders([secret], id, new Date(Date.now() - 10 * 60_000), body);
    expect(() => new Webhook(secret).verify(body.toString(), headers)).toThrow(/too old/);
    expect(verifyStandard(secret, body, { ...fields(headers) })).toBe(false);
  });

  it("when the body is altered, then neither the package nor verifyStandard accepts it", () => {
    const secret = issued();
    const headers = standardHeaders([secret], id, new Date(), body);
    const altered = body.toString().replace('"1"', '"2"');
    expect(() => new Webhook(secret).verify(altered, headers)).toThrow();
    expect(verifyStandard(secret, altered, fields(headers))).toBe(false);
    expect(verifyStandard(secret, body, fields(headers))).toBe(true);
  });

  it("derives the key the way the package does: base64 of the part after whsec_", () => {
    const raw = randomBytes(32);
    expect(webhookKey(`whsec_${raw.toString("base64")}`).equals(raw)).toBe(true);
    expect(webhookKey("whsec_not_base64!").equals(Buffer.from("whsec_not_base64!"))).toBe(true);
  });
});

function fields(headers: Record<string, string>) {
  return {
    id: headers["webhook-id"],
    timestamp: headers["webhook-timestamp"],
    signature: headers["webhook-signature"],
  };
}
