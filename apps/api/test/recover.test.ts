/**
 * Recovery on the public API: POST /api/v1/bots/{id}/webhook/recover starts one (202 with its id and
 * count; what it counts), refuses a bad window (400), a bad token (401), another bot (404), a
 * caller over its own tight limit (429), a disabled webhook, no webhook and an overlap (409 with
 * X-Botdir-Conflict); GET …/webhook/recoveries/{rid} reads one of the token's own bot only.
 */
import { randomUUID } from "node:crypto";
import { randomUserId, seedBot } from "@botdir/db/testing";
import { CONFLICT_HEADER, RecoverResponse, RecoveryResponse } from "@botdir/schema";
import request from "supertest";
import { type Harness, useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { recover: 1_000, deliveries: 1_000 } });

/** The harness clock's now (support.ts): windows are relative to it. */
const NOW = new Date("2026-11-21T12:00:00.000Z").getTime();
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const iso = (ms: number) => new Date(ms).toISOString();

async function newBot(harness: Harness = h) {
  const bot = await seedBot(harness.t.db);
  await harness.t.db.pool.query(
    "UPDATE bots SET webhook_url = $2, webhook_secret_encrypted = 'x' WHERE id = $1",
    [bot.id, "https://hooks.example.com/vote"],
  );
  return { id: bot.id, auth: { Authorization: `Bearer ${bot.token}` } };
}

/** A vote cast `hoursAgo` before NOW, with a delivery in `state`, or none (cast while disabled). */
async function seedVote(botId: string, hoursAgo: number, state: "pending" | "delivered" | "failed" | null) {
  const votedAt = new Date(NOW - hoursAgo * HOUR);
  const vote = await h.t.db.prisma.vote.create({ data: { botId, userId: randomUserId(), votedAt } });
  if (state !== null) {
    await h.t.db.prisma.delivery.create({
      data: {
        id: randomUUID(),
        botId,
        voteId: vote.id,
        state,
        attemptsMade: state === "pending" ? 0 : 5,
        nextAttemptAt: votedAt,
        handedOffAt: votedAt,
      },
    });
  }
}

const recover = (id: string, auth: Record<string, string>, body: unknown, target = app) =>
  request(target)
    .post(`/api/v1/bots/${id}/webhook/recover`)
    .set(auth)
    .send(body as object);
const read = (id: string, rid: string, auth: Record<string, string>, target = app) =>
  request(target).get(`/api/v1/bots/${id}/webhook/recoveries/${rid}`).set(auth);

describe("POST /api/v1/bots/{id}/webhook/recover", () => {
  it("when the window holds failed, never-delivered, delivered and pending votes, then 202 counts the failed and never-delivered ones inside it, and the read shows them pending", async () => {
    const { id, auth } = await newBot();
    await seedVote(id, 5, "failed");
    await seedVote(id, 4, null);
    await seedVote(id, 3, "delivered");
    await seedVote(id, 2, "pending");
    await seedVote(id, 30, "failed"); // before since
    await seedVote(id, 0.5, "failed"); // at or after until
    const res = await recover(id, auth, { since: iso(NOW - 6 * HOUR), until: iso(NOW - HOUR) });
    expect(res.status).toBe(202);
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(res.headers["ratelimit-limit"]).toBe("1000");
    expect(RecoverResponse.strict().safeParse(res.body).success).toBe(true);
    expect(Object.keys(res.body)).toEqual(["recoveryId", "queued"]);
    expect(res.body.queued).toBe(2);

    const got = await read(id, res.body.recoveryId, auth);
    expect(got.status).toBe(200);
    expect(RecoveryResponse.strict().safeParse(got.body).success).toBe(true);
    expect(got.body).toEqual({
      recoveryId: res.body.recoveryId,
      state: "running",
      since: iso(NOW - 6 * HOUR),
      until: iso(NOW - HOUR),
      queued: 2,
      delivered: 0,
      failed: 0,
      pending: 2,
      createdAt: iso(NOW),
      finishedAt: null,
    });
  });

  it("when until is left out or later than now, then the window ends now; with nothing to send, then 202 with 0 and the recovery is done", async () => {
    const { id, auth } = await newBot();
    await seedVote(id, 2, "delivered");
    const res = await recover(id, auth, { since: iso(NOW - DAY), until: iso(NOW + DAY) });
    expect(res.status).toBe(202);
    expect(res.body.queued).toBe(0);
    const got = await read(id, res.body.recoveryId, auth);
    expect(got.body).toMatchObject({
      state: "done",
      until: iso(NOW),
      queued: 0,
      pending: 0,
      finishedAt: iso(NOW),
    });
    const open = await recover(id, auth, { since: iso(NOW - DAY) });
    expect(open.status).toBe(202);
    expect((await read(id, open.body.recoveryId, auth)).body.until).toBe(iso(NOW));
  });

  it("when since is exactly 14 days back, then it starts; a millisecond further back, then 400", async () => {
    const { id, auth } = await newBot();
    expect((await recover(id, auth, { since: iso(NOW - 14 * DAY) })).status).toBe(202);
    const res = await recover(id, auth, { since: iso(NOW - 14 * DAY - 1) });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    });
  });

  it.each([
    ["no since", {}, "since is required."],
    [
      "since without a time zone",
      { since: "2026-11-21T10:00:00" },
      "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    ],
    [
      "since not a string",
      { since: 1 },
      "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    ],
    [
      "since in the future",
      { since: iso(NOW + HOUR) },
      "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    ],
    [
      "until not a date",
      { since: iso(NOW - DAY), until: "yesterday" },
      "until must be an ISO 8601 date-time with a time zone within the last 14 days.",
    ],
    ["until before since", { since: iso(NOW - HOUR), until: iso(NOW - DAY) }, "until must be after since."],
    [
      "until equal to since",
      { since: iso(NOW - HOUR), until: iso(NOW - HOUR) },
      "until must be after since.",
    ],
    ["an unknown field", { since: iso(NOW - HOUR), force: true }, 'Unknown field "force".'],
    ["an array body", [iso(NOW - HOUR)], "The body must be a JSON object with since."],
  ])("when the body has %s, then 400 naming it and no recovery is written", async (_name, body, error) => {
    const { id, auth } = await newBot();
    await seedVote(id, 2, "failed");
    const res = await recover(id, auth, body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error });
    const { rows } = await h.t.db.pool.query("SELECT 1 FROM webhook_recoveries WHERE bot_id = $1", [id]);
    expect(rows).toHaveLength(0);
  });

  it("when the body is not JSON, then 400 Invalid JSON body", async () => {
    const { id, auth } = await newBot();
    const res = await request(app)
      .post(`/api/v1/bots/${id}/webhook/recover`)
      .set(auth)
      .set("Content-Type", "application/json")
      .send("{since");
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "Invalid JSON body." });
  });

  it("when the token is missing or unknown, then 401 and nothing is written", async () => {
    const { id } = await newBot();
    await seedVote(id, 2, "failed");
    for (const auth of [{}, { Authorization: "Bearer not-a-token" }] as Record<string, string>[]) {
      const res = await recover(id, auth, { since: iso(NOW - DAY) });
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "Invalid token." });
    }
    const { rows } = await h.t.db.pool.query("SELECT 1 FROM webhook_recoveries WHERE bot_id = $1", [id]);
    expect(rows).toHaveLength(0);
  });

  it("when the path id is another bot's, unknown or not an id, then the same 404 (never 403) and the other bot gets no recovery", async () => {
    const mine = await newBot();
    const theirs = await newBot();
    await seedVote(theirs.id, 2, "failed");
    for (const pathId of [theirs.id, "123456789012345678", "abc"]) {
      const res = await recover(pathId, mine.auth, { since: iso(NOW - DAY) });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: "Bot not found." });
    }
    const { rows } = await h.t.db.pool.query("SELECT 1 FROM webhook_recoveries WHERE bot_id = $1", [
      theirs.id,
    ]);
    expect(rows).toHaveLength(0);
  });

  it("when the webhook is disabled, then 409 webhook_disabled saying to enable it first", async () => {
    const { id, auth } = await newBot();
    await seedVote(id, 2, null);
    await h.t.db.pool.query("UPDATE bots SET webhook_disabled_at = now() WHERE id = $1", [id]);
    const res = await recover(id, auth, { since: iso(NOW - DAY) });
    expect(res.status).toBe(409);
    expect(res.headers[CONFLICT_HEADER.toLowerCase()]).toBe("webhook_disabled");
    expect(res.body).toEqual({
      error: "The webhook is disabled; enable it first (recoverSince on enable does both).",
    });
  });

  it("when the bot has no webhook URL, then 409 no_webhook", async () => {
    const bot = await seedBot(h.t.db);
    const res = await recover(bot.id, { Authorization: `Bearer ${bot.token}` }, { since: iso(NOW - DAY) });
    expect(res.status).toBe(409);
    expect(res.headers[CONFLICT_HEADER.toLowerCase()]).toBe("no_webhook");
    expect(res.body).toEqual({ error: "The bot has no webhook URL; set one before recovering." });
  });

  it("when a recovery over an overlapping window is running, then 409 recovery_running naming it; a window that does not overlap starts", async () => {
    const { id, auth } = await newBot();
    await seedVote(id, 10, "failed");
    await seedVote(id, 3, "failed");
    const first = await recover(id, auth, { since: iso(NOW - 12 * HOUR), until: iso(NOW - 6 * HOUR) });
    expect(first.status).toBe(202);
    expect(first.body.queued).toBe(1);
    const overlapping = await recover(id, auth, { since: iso(NOW - 7 * HOUR) });
    expect(overlapping.status).toBe(409);
    expect(overlapping.headers[CONFLICT_HEADER.toLowerCase()]).toBe("recovery_running");
    expect(overlapping.body).toEqual({
      error: `Recovery ${first.body.recoveryId} over an overlapping window is still running.`,
    });
    const after = await recover(id, auth, { since: iso(NOW - 6 * HOUR) });
    expect(after.status).toBe(202);
    expect(after.body.queued).toBe(1);
  });

  it("when the token is over its own limit, then 429 with retryAfter while the delivery log's limit is untouched", async () => {
    const limited = h.app({ limits: { recover: 1, deliveries: 1_000 } });
    const { id, auth } = await newBot();
    const first = await recover(id, auth, { since: iso(NOW - DAY) }, limited);
    expect(first.status).toBe(202);
    const second = await recover(id, auth, { since: iso(NOW - 2 * DAY) }, limited);
    expect(second.status).toBe(429);
    expect(second.body).toEqual({ error: "Rate limit exceeded.", retryAfter: expect.any(Number) });
    expect(second.body.retryAfter).toBeGreaterThan(0);
    expect(second.headers["retry-after"]).toBe(String(second.body.retryAfter));
    const list = await request(limited).get(`/api/v1/bots/${id}/webhook/deliveries`).set(auth);
    expect(list.status).toBe(200);
  });

  it("the default limit is 2 a minute", async () => {
    const { id, auth } = await newBot();
    const res = await recover(id, auth, { since: iso(NOW - DAY) }, h.app());
    expect(res.headers["ratelimit-limit"]).toBe("2");
  });
});

describe("GET /api/v1/bots/{id}/webhook/recoveries/{recoveryId}", () => {
  it("when the id is another bot's, unknown or not a UUID, then the same 404 Recovery not found", async () => {
    const mine = await newBot();
    const theirs = await newBot();
    await seedVote(theirs.id, 2, "failed");
    const started = await recover(theirs.id, theirs.auth, { since: iso(NOW - DAY) });
    expect(started.status).toBe(202);
    for (const rid of [started.body.recoveryId, randomUUID(), "not-a-uuid", "1%20OR%201=1"]) {
      const res = await read(mine.id, rid, mine.auth);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: "Recovery not found." });
    }
    expect((await read(theirs.id, started.body.recoveryId, theirs.auth)).status).toBe(200);
  });

  it("when the path bot is not the token's, then 404 Bot not found; a bad token 401", async () => {
    const mine = await newBot();
    const theirs = await newBot();
    const started = await recover(theirs.id, theirs.auth, { since: iso(NOW - DAY) });
    const res = await read(theirs.id, started.body.recoveryId, mine.auth);
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "Bot not found." });
    const bad = await read(theirs.id, started.body.recoveryId, { Authorization: "Bearer nope" });
    expect(bad.status).toBe(401);
  });
});
