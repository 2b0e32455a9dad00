import { sign } from "@botdir/signing";
import { fetchWebhook, memorySeenStore } from "./adapters.js";
import type { VoteEvent } from "./contract.js";

describe("memorySeenStore", () => {
  it("when an id comes again, then add is false; the least recently seen id is forgotten first", () => {
    const seen = memorySeenStore(2);
    expect([seen.add("a"), seen.add("b"), seen.add("a")]).toEqual([true, true, false]);
    expect(seen.add("c")).toBe(true); // evicts b, the least recently seen
    expect(seen.add("a")).toBe(false);
    expect(seen.add("b")).toBe(true);
  });
});

describe("fetchWebhook with legacy headers only", () => {
  const SECRET = "whsec_legacy_only";
  const vote = (userId: string) =>
    JSON.stringify({
      event: "vote.create",
      bot_id: "123456789012345678",
      user_id: userId,
      voted_at: "2026-11-21T12:00:00.000Z",
    });
  const request = (body: string) =>
    new Request("http://127.0.0.1/hook", {
      method: "POST",
      headers: { authorization: SECRET, "x-webhook-signature-256": sign(SECRET, body) },
      body,
    });

  it("when requests carry no delivery id, then votes are told apart by user and time: each once", async () => {
    const handed: VoteEvent[] = [];
    let done: () => void = () => {};
    const allHanded = new Promise<void>((resolve) => {
      done = resolve;
    });
    const handle = fetchWebhook({
      secret: SECRET,
      onVote: (v) => {
        handed.push(v);
        if (handed.length === 2) done();
      },
    });
    const answers = [];
    for (const body of [vote("223456789012345678"), vote("223456789012345678"), vote("323456789012345678")]) {
      answers.push((await handle(request(body))).status);
    }
    await allHanded;
    expect(answers).toEqual([204, 204, 204]);
    expect(handed.map((v) => v.user_id)).toEqual(["223456789012345678", "323456789012345678"]);
  });
});
