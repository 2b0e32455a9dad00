/**
 * The vote page's query string in vote.create: a vote cast with one (vote_log.query) is delivered
 * with `"query": {...}` after `voted_at`, signed like the rest of the body, by a `vote.create` job,
 * by a `vote.batch` job and on a retry; a vote cast without one has no `query` key at all.
 */
import { createHmac, randomUUID } from "node:crypto";
import { randomUserId } from "@botdir/db/testing";
import { type DispatcherHarness, startDispatcherHarness } from "./support.js";

let h: DispatcherHarness;
beforeAll(async () => {
  h = await startDispatcherHarness();
});
afterAll(() => h.close());

/** A vote cast with `query` (or none) and its pending delivery, as vote-ingest writes them. */
async function voteWith(botId: string, query: Record<string, string> | null) {
  const userId = randomUserId();
  const votedAt = new Date();
  const vote = await h.db.prisma.vote.create({
    data: { botId, userId, votedAt, ...(query ? { query } : {}) },
  });
  const id = randomUUID();
  await h.db.prisma.delivery.create({ data: { id, botId, voteId: vote.id, nextAttemptAt: votedAt } });
  return { id, botId, userId, votedAt, nextAttemptAt: votedAt };
}

const QUERY = { ref: "discord-ad", utm_source: "ünï 🎉" };

describe("vote.create with the vote page's query", () => {
  it("when the vote was cast with a query, then the body carries it after voted_at, signed, and a retry sends the same bytes", async () => {
    const r = await h.receiver((_req, n) => ({ status: n === 1 ? 500 : 204 }));
    const { bot, secret } = await h.webhookBot(r.url());
    const delivery = await voteWith(bot.id, QUERY);

    await h.handOff(delivery);
    await h.waitForState(delivery.id, "delivered");

    expect(r.requests).toHaveLength(2);
    const [first, second] = r.requests;
    expect(first?.body.toString("utf8")).toBe(
      JSON.stringify({
        event: "vote.create",
        bot_id: bot.id,
        user_id: delivery.userId,
        voted_at: delivery.votedAt.toISOString(),
        query: QUERY,
      }),
    );
    expect(second?.body.equals(first?.body as Buffer)).toBe(true);
    const signature = `sha256=${createHmac("sha256", secret)
      .update(first?.body as Buffer)
      .digest("hex")}`;
    expect(first?.headers["x-webhook-signature-256"]).toBe(signature);
  });

  it("when the vote was cast without a query, then the body has no query key", async () => {
    const r = await h.receiver();
    const { bot } = await h.webhookBot(r.url());
    const delivery = await voteWith(bot.id, null);

    await h.handOff(delivery);
    await h.waitForState(delivery.id, "delivered");

    const body = JSON.parse(r.requests[0]?.body.toString("utf8") ?? "{}");
    expect(Object.keys(body)).toEqual(["event", "bot_id", "user_id", "voted_at"]);
  });

  it("when votes with and without a query go in one vote.batch job, then each body is its own vote's", async () => {
    const r = await h.receiver();
    const { bot } = await h.webhookBot(r.url());
    const withQuery = await voteWith(bot.id, { ref: "batch" });
    const without = await voteWith(bot.id, null);

    await h.handOffBatch([withQuery, without].map((d) => ({ id: d.id, botId: bot.id })));
    await h.waitForState(withQuery.id, "delivered");
    await h.waitForState(without.id, "delivered");

    const bodies = new Map(
      r.requests.map((q) => [q.headers["x-webhook-delivery"], JSON.parse(q.body.toString("utf8"))]),
    );
    expect(bodies.get(withQuery.id)?.query).toEqual({ ref: "batch" });
    expect(bodies.get(without.id)).not.toHaveProperty("query");
  });
});
