import { seedBot } from "@botdir/db/testing";
import { CommandsResponse } from "@botdir/schema";
import request from "supertest";
import { cmd, expectAnswer, refuseBotUpdates, useHarness } from "./support.js";

const { h, app } = useHarness({ limits: { commands: 1_000 } });

async function newBot() {
  const bot = await seedBot(h.t.db);
  return { id: bot.id, auth: { Authorization: bot.token! } };
}

const put = (id: string, auth: Record<string, string>) =>
  request(app).put(`/api/v1/bots/${id}/commands`).set(auth);
const stored = async (id: string) => (await h.t.db.prisma.bot.findUniqueOrThrow({ where: { id } })).commands;

describe("PUT /api/v1/bots/{id}/commands", () => {
  it("when a list is sent, then 200 {success, count} with exactly those fields, and the list is stored", async () => {
    const { id, auth } = await newBot();
    const res = await put(id, auth).send({ commands: [cmd("ping"), cmd("help")] });
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.body).toEqual({ success: true, count: 2 });
    expect(CommandsResponse.strict().safeParse(res.body).success).toBe(true);
    expect(await stored(id)).toEqual([cmd("ping"), cmd("help")]);
  });

  it("when a second list is sent, then it replaces the first (a removed command disappears)", async () => {
    const { id, auth } = await newBot();
    await put(id, auth).send({ commands: [cmd("a"), cmd("b")] });
    const res = await put(id, auth).send({ commands: [cmd("c")] });
    expect(res.body).toEqual({ success: true, count: 1 });
    expect(await stored(id)).toEqual([cmd("c")]);
  });

  it("when names repeat, then the first occurrence is kept and count is after de-duplication", async () => {
    const { id, auth } = await newBot();
    const res = await put(id, auth).send({
      commands: [cmd("ping", "first"), cmd("help"), cmd("ping", "second"), cmd("help", "again")],
    });
    expect(res.body).toEqual({ success: true, count: 2 });
    expect(await stored(id)).toEqual([cmd("ping", "first"), cmd("help")]);
  });

  it("when the list is empty, then it clears the commands", async () => {
    const { id, auth } = await newBot();
    await put(id, auth).send({ commands: [cmd("a")] });
    const res = await put(id, auth).send({ commands: [] });
    expect(res.body).toEqual({ success: true, count: 0 });
    expect(await stored(id)).toEqual([]);
  });

  it("when 100 platform commands localized into every locale are sent (over 256 kB), then they fit and keep every field", async () => {
    const { id, auth } = await newBot();
    const locales = [
      "id",
      "da",
      "de",
      "en-GB",
      "en-US",
      "es-ES",
      "es-419",
      "fr",
      "hr",
      "it",
      "lt",
      "hu",
      "nl",
      "no",
      "pl",
      "pt-BR",
      "ro",
      "fi",
      "sv-SE",
      "vi",
      "tr",
      "cs",
      "el",
      "bg",
      "ru",
      "uk",
      "hi",
      "th",
      "zh-CN",
      "ja",
      "zh-TW",
      "ko",
    ];
    const commands = Array.from({ length: 100 }, (_, i) => ({
      id: String(1_200_000_000_000_000_000n + BigInt(i)),
      type: 1,
      name: `command-${i}`,
      description: "d".repeat(100),
      name_localizations: Object.fromEntries(locales.map((l) => [l, `befehl-${i}`])),
      description_localizations: Object.fromEntries(locales.map((l) => [l, "é".repeat(100)])),
      options: [{ type: 3, name: "query", description: "What to look up", required: true }],
      default_member_permissions: null,
      contexts: [0, 1, 2],
    }));
    const body = JSON.stringify({ commands });
    expect(Buffer.byteLength(body)).toBeGreaterThan(256 * 1024);
    const res = await put(id, auth).set("Content-Type", "application/json").send(body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, count: 100 });
    expect(await stored(id)).toEqual(commands);
  });

  it.each([
    [
      { commands: Array.from({ length: 101 }, (_, i) => cmd(`c${i}`)) },
      "commands must hold at most 100 commands.",
    ],
    [{ commands: [cmd("ok"), cmd("x".repeat(33))] }, "commands[1].name must be 1 to 32 characters long."],
    [{ commands: [cmd("")] }, "commands[0].name must be 1 to 32 characters long."],
    [{ commands: [cmd("ok", "d".repeat(101))] }, "commands[0].description must be 1 to 100 characters long."],
    [{ commands: [{ name: "ok" }] }, "commands[0].description is required."],
    [{}, "commands is required."],
    [{ commands: "ping" }, "commands must be an array."],
    [[cmd("ping")], "The body must be a JSON object."],
    [
      { commands: [cmd("nul\u0000")] },
      "commands[0].name must not contain NUL or unpaired surrogate characters.",
    ],
    [
      { commands: [cmd("ok", "half \ud83d")] },
      "commands[0].description must not contain NUL or unpaired surrogate characters.",
    ],
  ])(
    "when the body is invalid (%#), then 400 naming the first problem and nothing changes",
    async (body, error) => {
      const { id, auth } = await newBot();
      await put(id, auth).send({ commands: [cmd("keep")] });
      const res = await put(id, auth).send(body as object);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error });
      expect(await stored(id)).toEqual([cmd("keep")]);
    },
  );

  it.each<[string, (req: ReturnType<typeof put>) => ReturnType<typeof put>, number, string]>([
    [
      "when the JSON does not parse, then 400 Invalid JSON body.",
      (req) => req.set("Content-Type", "application/json").send('{"commands": ['),
      400,
      "Invalid JSON body.",
    ],
    ["when there is no body, then 400 Invalid JSON body.", (req) => req, 400, "Invalid JSON body."],
    [
      "when the content type is not JSON, then 400 naming the content type",
      (req) => req.set("Content-Type", "text/plain").send('{"commands":[]}'),
      400,
      "Content-Type must be application/json.",
    ],
    [
      "when the body is over 1 MB, then a JSON 413",
      (req) =>
        req
          .set("Content-Type", "application/json")
          .send(JSON.stringify({ commands: [], padding: "x".repeat(1024 * 1024) })),
      413,
      "The request body is too large.",
    ],
  ])("%s", async (_title, send, status, error) => {
    const { id, auth } = await newBot();
    const res = await send(put(id, auth));
    expect(res.status).toBe(status);
    expect(res.body).toEqual({ error });
  });

  it("when the body is invalid and the token unknown, then 401 comes first", async () => {
    const { id } = await newBot();
    const res = await put(id, { Authorization: "unknown-token" })
      .set("Content-Type", "application/json")
      .send("{");
    expect(res.status).toBe(401);
  });

  it("when the body is invalid and the id is another bot's, then 404 comes first", async () => {
    const mine = await newBot();
    const other = await newBot();
    expectAnswer(await put(other.id, mine.auth).send({ commands: "x" }), 404, '{"error":"Bot not found."}');
  });
});

describe("POST /api/v1/bots/{id}/commands (discordbotlist.com's client spelling)", () => {
  const post = (id: string, auth: Record<string, string>) =>
    request(app).post(`/api/v1/bots/${id}/commands`).set(auth);

  it("when the platform's command array is posted bare, then it is stored and answered as the PUT would", async () => {
    const { id, auth } = await newBot();
    const res = await post(id, auth).send([cmd("ping", "first"), cmd("help"), cmd("ping", "second")]);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, count: 2 });
    expect(await stored(id)).toEqual([cmd("ping", "first"), cmd("help")]);
  });

  it("when {commands} is posted, then it replaces the list as the PUT does", async () => {
    const { id, auth } = await newBot();
    await post(id, auth).send([cmd("a"), cmd("b")]);
    const res = await post(id, auth).send({ commands: [cmd("c")] });
    expect(res.body).toEqual({ success: true, count: 1 });
    expect(await stored(id)).toEqual([cmd("c")]);
  });

  it.each([
    ["a bare empty array", []],
    ["101 commands bare", Array.from({ length: 101 }, (_, i) => cmd(`c${i}`))],
    ["101 commands wrapped", { commands: Array.from({ length: 101 }, (_, i) => cmd(`c${i}`)) }],
    ["a name of 33 characters", [cmd("ok"), cmd("x".repeat(33))]],
    ["a missing description", [{ name: "ok" }]],
    ["no commands field", {}],
    ["a string", "ping"],
    ["NUL in a name", [cmd("nul\u0000")]],
  ])("when the body is %s, then the status and body are the PUT's for the same list", async (_what, body) => {
    const { id, auth } = await newBot();
    const putBody = Array.isArray(body) ? { commands: body } : body;
    const viaPut = await put(id, auth).set("Content-Type", "application/json").send(JSON.stringify(putBody));
    const viaPost = await post(id, auth).set("Content-Type", "application/json").send(JSON.stringify(body));
    expect(viaPost.status).toBe(viaPut.status);
    expect(viaPost.body).toEqual(viaPut.body);
  });

  it("when the token is unknown, or the id another bot's, then the PUT's 401 and 404", async () => {
    const mine = await newBot();
    const other = await newBot();
    const unknown = await post(mine.id, { Authorization: "unknown-token" }).send([cmd("a")]);
    expect(unknown.status).toBe(401);
    expectAnswer(await post(other.id, mine.auth).send([cmd("a")]), 404, '{"error":"Bot not found."}');
  });

  it("when PUT and POST are mixed, then they share one budget of the commands limit", async () => {
    const limited = h.app({ limits: { commands: 3 } });
    const { id, auth } = await newBot();
    const answers: request.Response[] = [];
    for (const method of ["put", "post", "put", "post"] as const) {
      const body = method === "put" ? { commands: [cmd("a")] } : [cmd("a")];
      answers.push(await request(limited)[method](`/api/v1/bots/${id}/commands`).set(auth).send(body));
    }
    expect(answers.map((res) => res.status)).toEqual([200, 200, 200, 429]);
    expect(answers[3]?.body).toEqual({ error: "Rate limit exceeded.", retryAfter: expect.any(Number) });
  });
});

describe("page cache", () => {
  it("when the list changes, then the bot's page cache key is deleted; when it is the same, then it is kept", async () => {
    const { id, auth } = await newBot();
    const key = `${h.prefix}page:bot:${id}`;
    await put(id, auth).send({ commands: [cmd("a"), cmd("b")] });

    await h.redis.set(key, "<rendered page>");
    // Same list (a duplicate of "a" is dropped, so the stored list is identical).
    await put(id, auth).send({ commands: [cmd("a"), cmd("b"), cmd("a", "dup")] });
    expect(await h.redis.get(key)).toBe("<rendered page>");

    await put(id, auth).send({ commands: [cmd("a")] });
    expect(await h.redis.exists(key)).toBe(0);
  });

  it("when another bot's list changes, then this bot's page cache stays", async () => {
    const mine = await newBot();
    const other = await newBot();
    const key = `${h.prefix}page:bot:${mine.id}`;
    await h.redis.set(key, "<rendered page>");
    await put(other.id, other.auth).send({ commands: [cmd("z")] });
    expect(await h.redis.get(key)).toBe("<rendered page>");
  });
});

describe("storage failure", () => {
  it("when the write fails in PostgreSQL, then 500 with the error body and nothing leaks", async () => {
    const { id, auth } = await newBot();
    const allowUpdates = await refuseBotUpdates(h.t, id);
    try {
      const res = await put(id, auth).send({ commands: [cmd("a")] });
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ error: "The request could not be completed; retry with backoff." });
      expect(h.logger.lines.some((l) => l.level === "error")).toBe(true);
    } finally {
      await allowUpdates();
    }
  });
});
