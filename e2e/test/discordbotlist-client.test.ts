/**
 * discordbotlist.com's own npm client (`discordbotlist`), unmodified, against a live API process:
 * only its base URL is changed. The package builds every URL from the `BASE_URL` export of
 * `api/endpoints.js` (`route()` reads `exports.BASE_URL` on each call), so assigning that export is
 * how an owner points it at this directory. `postBotCommands` POSTs the platform's command array
 * bare to `/bots/{id}/commands`; its stats post sends `guilds` with the bare token.
 */
import { createRequire } from "node:module";
import { type Stack, startStack } from "../src/stack.js";

type Dbl = typeof import("discordbotlist");
const require = createRequire(import.meta.url);
const dbl = require("discordbotlist") as Dbl;
const endpoints = require("discordbotlist/api/endpoints") as { BASE_URL: string };

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ privateRedis: true, replicas: { "vote-ingest": 0, "webhook-dispatcher": 0 } });
  endpoints.BASE_URL = `${stack.api.base}/api/v1`;
}, 180_000);
afterAll(() => stack?.stop());

/** What a bot built on discord.js registers with the platform (and so hands to the client). */
const COMMANDS = [
  { name: "ping", description: "Replies with pong", type: 1 },
  {
    name: "rank",
    description: "Shows a member's rank",
    type: 1,
    options: [{ type: 6, name: "member", description: "Whose rank", required: false }],
  },
  { name: "Report message", type: 3 },
];

const storedBot = (id: string) => stack.db.prisma.bot.findUniqueOrThrow({ where: { id } });

describe("the discordbotlist npm client with its base URL changed", () => {
  it("points every request at the live API process", () => {
    expect(dbl.route("/bots/1/commands")).toBe(`${stack.api.base}/api/v1/bots/1/commands`);
  });

  it("when postBotCommands is called, then the bare array is stored as the command list", async () => {
    const bot = await stack.knownBot();
    await expect(dbl.postBotCommands(bot.token!, bot.id, COMMANDS)).resolves.toBeUndefined();
    expect((await storedBot(bot.id)).commands).toEqual(COMMANDS);
  });

  it("when the client object posts commands and stats, then both are stored", async () => {
    const bot = await stack.knownBot();
    const adapter = { botId: bot.id, getBotStats: async () => ({ guilds: 1234, users: 56_789 }) };
    const client = new dbl.DBLClient(
      bot.token!,
      adapter as unknown as ConstructorParameters<Dbl["DBLClient"]>[1],
    );
    await client.postBotCommands(COMMANDS.slice(0, 1));
    await client.postBotStats();
    const row = await storedBot(bot.id);
    expect(row.commands).toEqual(COMMANDS.slice(0, 1));
    expect(Number(row.serverCount)).toBe(1234);
  });

  it("when postBotStats sends guilds with a shard id, then the count is stored", async () => {
    const bot = await stack.knownBot();
    await dbl.postBotStats(bot.token!, bot.id, { guilds: 77, shard_id: 0, users: 1000 });
    expect(Number((await storedBot(bot.id)).serverCount)).toBe(77);
  });

  it("when the token is wrong, then postBotCommands rejects with the package's DBLError carrying our 401", async () => {
    const bot = await stack.knownBot();
    const error = await dbl.postBotCommands("not-a-token", bot.id, COMMANDS).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(dbl.DBLError);
    const { context } = error as InstanceType<Dbl["DBLError"]>;
    const response = (context as { response?: Response } | undefined)?.response;
    expect(response?.status).toBe(401);
    expect((await storedBot(bot.id)).commands).toEqual([]);
  });
});
