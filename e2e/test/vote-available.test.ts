/**
 * `vote.available` with the real processes: a webhook that chose vote.create and vote.available
 * gets the vote at once and, when the vote's window ends, a signed vote.available with its own
 * delivery id and `available_at` = voted_at + 12 h, within 10 s. Twelve hours are not waited for:
 * the test moves the window rows' remind_at (what the cast wrote: the window's end) to now, the
 * only state the scheduler reads. Two vote-ingest replicas schedule the same due reminders and each
 * is sent once; a webhook that dropped vote.available before the window ended gets none. The
 * owner's delivery log names each attempt's event.
 */
import { randomUserId } from "@botdir/db/testing";
import { verify, verifyStandard } from "@botdir/signing";
import { call, waitFor } from "../src/processes.js";
import { useStack } from "../src/stack.js";

const WINDOW_MS = 12 * 3_600_000;
const stack = useStack({ dist: true, replicas: { "vote-ingest": 2 } });

async function chooseEvents(botId: string, events: string[]) {
  const res = await call(`${stack.ingest.base}/internal/v1/bots/${botId}/webhook/events`, {
    method: "PUT",
    headers: { authorization: stack.keys.internalKey },
    body: { events },
    // A listing change, not what is measured: a first request on a busy machine may take long.
    timeoutMs: 60_000,
  });
  expect(res.status).toBe(200);
}

/** Ends the windows of `botId`'s votes now: their reminders become due. */
async function endWindows(botId: string): Promise<number> {
  const { rowCount } = await stack.db.pool.query(
    "UPDATE vote_windows SET remind_at = now() WHERE bot_id = $1 AND remind_at IS NOT NULL",
    [botId],
  );
  return rowCount ?? 0;
}

const ofEvent = (path: string, event: string) =>
  stack.receiver.forPath(path).filter((r) => r.headers["x-webhook-event"] === event);

describe("vote.available with real processes", () => {
  it("when the window of a vote ends, then the receiver gets one signed vote.available within 10 s, its own delivery, after the vote.create", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/both"));
    await chooseEvents(bot.id, ["vote.create", "vote.available"]);
    const user = randomUserId();
    const cast = await stack.vote(bot.id, user);
    expect(cast.status).toBe(201);
    const { vote, nextVoteAt } = cast.body as { vote: { voted_at: string }; nextVoteAt: string };
    await waitFor(() => ofEvent("/both", "vote.create").length === 1 || null, "the vote.create");

    expect(await endWindows(bot.id)).toBe(1);
    const due = Date.now();
    const [got] = await waitFor(() => {
      const found = ofEvent("/both", "vote.available");
      return found.length > 0 ? found : null;
    }, "the vote.available");

    expect(got!.at - due).toBeLessThan(10_000);
    const body = got!.body.toString("utf8");
    expect(body).toBe(
      JSON.stringify({
        event: "vote.available",
        bot_id: bot.id,
        user_id: user,
        voted_at: vote.voted_at,
        available_at: nextVoteAt,
      }),
    );
    expect(new Date(nextVoteAt).getTime() - new Date(vote.voted_at).getTime()).toBe(WINDOW_MS);
    expect(verify(bot.secret, got!.body, got!.headers["x-webhook-signature-256"] as string)).toBe(true);
    expect(
      verifyStandard(bot.secret, got!.body, {
        id: got!.headers["webhook-id"] as string,
        timestamp: got!.headers["webhook-timestamp"] as string,
        signature: got!.headers["webhook-signature"] as string,
      }),
    ).toBe(true);
    const [created] = ofEvent("/both", "vote.create");
    expect(got!.headers["x-webhook-delivery"]).not.toBe(created!.headers["x-webhook-delivery"]);
    expect(got!.headers["x-webhook-trace"]).toMatch(/^[0-9a-f]{32}$/);
    // The receiver has the request a moment before the dispatcher records its outcome.
    const rows = await waitFor(async () => {
      const found = await stack.deliveries(bot.id);
      return found.length === 2 && found.every((r) => r.state !== "pending") ? found : null;
    }, "both deliveries to end");
    expect(rows.map((r) => [r.event, r.state])).toEqual([
      ["vote.create", "delivered"],
      ["vote.available", "delivered"],
    ]);

    // The owner's delivery log, on the public API and on the edit page's, names each attempt's event.
    const logs = [
      await call(`${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries`, {
        headers: { authorization: bot.token },
      }),
      await call(`${stack.ingest.base}/internal/v1/bots/${bot.id}/webhook/deliveries`, {
        headers: { authorization: stack.keys.internalKey },
      }),
    ];
    for (const log of logs) {
      expect(log.status).toBe(200);
      const { attempts } = log.body as { attempts: { deliveryId: string; event: string }[] };
      expect(attempts.map((a) => [a.deliveryId, a.event])).toEqual([
        [got!.headers["x-webhook-delivery"], "vote.available"],
        [created!.headers["x-webhook-delivery"], "vote.create"],
      ]);
    }
  });

  it("when two vote-ingest replicas schedule the same due reminders, then each vote's vote.available arrives once", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/many"));
    await chooseEvents(bot.id, ["vote.available"]);
    const users = Array.from({ length: 40 }, () => randomUserId());
    for (const user of users) expect((await stack.vote(bot.id, user)).status).toBe(201);

    expect(await endWindows(bot.id)).toBe(users.length);
    await waitFor(
      () => ofEvent("/many", "vote.available").length >= users.length || null,
      "every vote.available",
    );
    // Every reminder taken, every delivery done: nothing more can come.
    await waitFor(async () => {
      const rows = await stack.deliveries(bot.id);
      return rows.length === users.length && rows.every((r) => r.state === "delivered") ? true : null;
    }, "the deliveries to end");
    const got = ofEvent("/many", "vote.available");
    const userIds = got.map((r) => JSON.parse(r.body.toString("utf8")).user_id);
    expect(new Set(userIds)).toEqual(new Set(users));
    expect(got).toHaveLength(users.length);
    expect(
      stack.receiver.forPath("/many").filter((r) => r.headers["x-webhook-event"] === "vote.create"),
    ).toEqual([]);
  });

  it("when the webhook drops vote.available before the window ends, then none is sent", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/dropped"));
    await chooseEvents(bot.id, ["vote.create", "vote.available"]);
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    await waitFor(() => ofEvent("/dropped", "vote.create").length === 1 || null, "the vote.create");
    await chooseEvents(bot.id, ["vote.create"]);

    expect(await endWindows(bot.id)).toBe(1);
    // The scheduler took the reminder (remind_at cleared) and made nothing.
    await waitFor(async () => {
      const { rows } = await stack.db.pool.query(
        "SELECT count(*)::int AS n FROM vote_windows WHERE bot_id = $1 AND remind_at IS NOT NULL",
        [bot.id],
      );
      return rows[0].n === 0 ? true : null;
    }, "the reminder to be taken");
    expect((await stack.deliveries(bot.id)).map((r) => r.event)).toEqual(["vote.create"]);
    expect(ofEvent("/dropped", "vote.available")).toEqual([]);
  });
});
