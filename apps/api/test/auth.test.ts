import type { RequestListener } from "node:http";
import { generateToken, hashToken } from "@botdir/db";
import { randomBotId, seedBot } from "@botdir/db/testing";
import request from "supertest";
import { cmd, expectAnswer, USER, useHarness } from "./support.js";

// Limits high enough that the matrix below never meets them.
const { h, app } = useHarness({ limits: { commands: 1_000, stats: 1_000, votes: 1_000 } });

type Send = (app: RequestListener, id: string, headers: Record<string, string>) => request.Test;

const ENDPOINTS: { name: string; send: Send }[] = [
  {
    name: "PUT /commands",
    send: (a, id, headers) =>
      request(a)
        .put(`/api/v1/bots/${id}/commands`)
        .set(headers)
        .send({ commands: [cmd("ping")] }),
  },
  {
    name: "POST /stats",
    send: (a, id, headers) =>
      request(a).post(`/api/v1/bots/${id}/stats`).set(headers).send({ server_count: 5 }),
  },
  {
    name: "GET /check",
    send: (a, id, headers) => request(a).get(`/api/v1/bots/${id}/check?userId=${USER}`).set(headers),
  },
  {
    name: "GET /votes",
    send: (a, id, headers) => request(a).get(`/api/v1/bots/${id}/votes`).set(headers),
  },
];

describe.each(ENDPOINTS)("$name authentication", ({ send }) => {
  let bot: { id: string; token: string };
  let other: { id: string; token: string };

  beforeAll(async () => {
    const a = await seedBot(h.t.db);
    const b = await seedBot(h.t.db);
    bot = { id: a.id, token: a.token! };
    other = { id: b.id, token: b.token! };
  });

  it.each([
    ["the bare token", (t: string) => t],
    ["Bearer <token>", (t: string) => `Bearer ${t}`],
    ["bearer <token> (scheme in lower case)", (t: string) => `bearer ${t}`],
    ["BEARER <token> with extra spaces", (t: string) => `BEARER   ${t} `],
    ["Bot <token> (discordbotlist.com clients)", (t: string) => `Bot ${t}`],
    ["bot <token>", (t: string) => `bot ${t}`],
  ])("when Authorization is %s, then 200", async (_name, form) => {
    const res = await send(app, bot.id, { Authorization: form(bot.token) });
    expect(res.status).toBe(200);
    expect(res.headers["ratelimit-limit"]).toBeDefined();
  });

  it.each([
    ["missing", {}],
    ["empty", { Authorization: "" }],
    ["only a scheme", { Authorization: "Bearer " }],
    ["an unknown token", { Authorization: generateToken() }],
    ["an unknown Bearer token", { Authorization: `Bearer ${generateToken()}` }],
    ["garbage with spaces", { Authorization: "Token abc def" }],
    ["another scheme", { Authorization: "Basic dXNlcjpwYXNz" }],
  ])(
    "when Authorization is %s, then 401 Invalid token. without rate-limit headers",
    async (_name, headers) => {
      const res = await send(app, bot.id, headers as Record<string, string>);
      expectAnswer(res, 401, '{"error":"Invalid token."}');
      expect(res.headers["ratelimit-remaining"]).toBeUndefined();
    },
  );

  it("when the path id is another bot's, an unknown id or not an id, then the same 404 bytes", async () => {
    const auth = { Authorization: bot.token };
    const answers = await Promise.all(
      [other.id, randomBotId(), "not-an-id", "123", "1".repeat(25), "%00"].map((id) => send(app, id, auth)),
    );
    for (const res of answers) expectAnswer(res, 404, '{"error":"Bot not found."}');
  });

  it("when the token is unknown and the id is invalid, then 401 comes before 404", async () => {
    const res = await send(app, "nope", { Authorization: generateToken() });
    expect(res.status).toBe(401);
  });

  it("when the token is rotated, then the old one gets 401 on the very next request and the new one works", async () => {
    const seeded = await seedBot(h.t.db);
    const before = await send(app, seeded.id, { Authorization: seeded.token! });
    expect(before.status).toBe(200);

    const rotated = generateToken();
    await h.t.db.prisma.bot.update({ where: { id: seeded.id }, data: { tokenHash: hashToken(rotated) } });

    const old = await send(app, seeded.id, { Authorization: seeded.token! });
    expect(old.status).toBe(401);
    const fresh = await send(app, seeded.id, { Authorization: `Bearer ${rotated}` });
    expect(fresh.status).toBe(200);
  });

  it("when the bot is pending approval, then its token is refused with 401", async () => {
    const pending = await seedBot(h.t.db, { status: "pending", withToken: true });
    const res = await send(app, pending.id, { Authorization: pending.token! });
    expect(res.status).toBe(401);
  });
});

describe("secrets in logs", () => {
  it("never logs the token, its hash or the Authorization value", async () => {
    const bot = await seedBot(h.t.db);
    for (const { send } of ENDPOINTS) {
      await send(app, bot.id, { Authorization: `Bot ${bot.token}` });
      await send(app, randomBotId(), { Authorization: bot.token! });
    }
    expect(h.logger.lines.length).toBeGreaterThan(0);
    const logged = h.logger.text();
    expect(logged).not.toContain(bot.token!);
    expect(logged).not.toContain(hashToken(bot.token!));
  });
});
