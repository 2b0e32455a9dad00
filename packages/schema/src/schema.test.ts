import {
  CastVoteBody,
  CheckQuery,
  Command,
  CommandsBody,
  clampLimit,
  dedupeCommands,
  describeIssue,
  parseOrThrow,
  StatsBody,
} from "./index.js";

function firstError(schema: Parameters<typeof parseOrThrow>[0], value: unknown): string {
  try {
    parseOrThrow(schema, value);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("expected a validation error");
}

const cmd = (name: string, description = "Does a thing") => ({ name, description });

describe("CommandsBody", () => {
  it("accepts 1- and 32-character names and refuses a 33-character name, naming it", () => {
    expect(CommandsBody.safeParse({ commands: [cmd("a"), cmd("b".repeat(32))] }).success).toBe(true);
    expect(firstError(CommandsBody, { commands: [cmd("ok"), cmd("x".repeat(33))] })).toBe(
      "commands[1].name must be 1 to 32 characters long.",
    );
  });

  it("refuses an empty name and an empty or 101-character description", () => {
    expect(CommandsBody.safeParse({ commands: [cmd("")] }).success).toBe(false);
    expect(firstError(CommandsBody, { commands: [cmd("a", "")] })).toBe(
      "commands[0].description must be 1 to 100 characters long.",
    );
    expect(CommandsBody.safeParse({ commands: [cmd("a", "d".repeat(101))] }).success).toBe(false);
    expect(CommandsBody.safeParse({ commands: [cmd("a", "d".repeat(100))] }).success).toBe(true);
  });

  it("counts characters as code points: 100 emoji (200 UTF-16 units) are a valid description", () => {
    const emoji = "😀".repeat(100);
    expect(emoji.length).toBe(200);
    expect(CommandsBody.safeParse({ commands: [cmd("fun", emoji)] }).success).toBe(true);
    expect(CommandsBody.safeParse({ commands: [cmd("fun", `${emoji}😀`)] }).success).toBe(false);
    expect(CommandsBody.safeParse({ commands: [cmd("🎲".repeat(32))] }).success).toBe(true);
  });

  it("accepts 100 commands and refuses 101", () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => cmd(`c${i}`));
    expect(CommandsBody.safeParse({ commands: many(100) }).success).toBe(true);
    expect(firstError(CommandsBody, { commands: many(101) })).toBe(
      "commands must hold at most 100 commands.",
    );
  });

  it("accepts an empty list, which clears the commands", () => {
    expect(CommandsBody.parse({ commands: [] }).commands).toEqual([]);
  });

  it("refuses a missing list, a non-array and a non-object body", () => {
    expect(firstError(CommandsBody, {})).toBe("commands is required.");
    expect(firstError(CommandsBody, { commands: "ping" })).toBe("commands must be an array.");
    expect(firstError(CommandsBody, [cmd("a")])).toBe("The body must be a JSON object.");
    expect(firstError(CommandsBody, null)).toBe("The body must be a JSON object.");
  });

  it("accepts a real platform command list with extra fields and context-menu commands, keeping them", () => {
    const platformList = [
      {
        id: "1104554254347419709",
        application_id: "1104554207165444126",
        version: "1104554254347419710",
        default_member_permissions: null,
        type: 1,
        name: "ping",
        name_localizations: { de: "ping", fr: "ping" },
        description: "Replies with the latency",
        description_localizations: { de: "Antwortet mit der Latenz" },
        dm_permission: true,
        contexts: [0, 1, 2],
        integration_types: [0, 1],
        nsfw: false,
        options: [
          {
            type: 3,
            name: "target",
            description: "Host to ping",
            required: false,
            choices: [{ name: "API", value: "api" }],
            autocomplete: false,
          },
          { type: 1, name: "sub", description: "A subcommand", options: [] },
        ],
      },
      { id: "1104554254347419711", type: 2, name: "Show Profile", description: "", contexts: [0] },
      { id: "1104554254347419712", type: 3, name: "Report Message", description: "" },
      { type: 4, name: "launch", description: "Launch the activity", handler: 2 },
    ];
    const parsed = CommandsBody.parse({ commands: platformList });
    expect(parsed.commands).toHaveLength(4);
    expect(parsed.commands[0]).toEqual(platformList[0]);
    expect(parsed.commands[1]).toMatchObject({ type: 2, name: "Show Profile" });
  });

  it("requires a description for chat commands but not for context-menu commands", () => {
    expect(Command.safeParse({ name: "Profile", type: 2 }).success).toBe(true);
    expect(Command.safeParse({ name: "ping", type: 1 }).success).toBe(false);
    expect(Command.safeParse({ name: "ping" }).success).toBe(false);
  });
});

describe("dedupeCommands", () => {
  it("drops repeated names and keeps the first occurrence, in order", () => {
    const out = dedupeCommands([
      cmd("a", "first"),
      cmd("b"),
      cmd("a", "second"),
      cmd("c"),
      cmd("b", "again"),
    ]);
    expect(out.map((c) => `${c.name}:${c.description}`)).toEqual([
      "a:first",
      "b:Does a thing",
      "c:Does a thing",
    ]);
  });

  it("treats names as unique per command type, as the platform does", () => {
    const out = dedupeCommands([{ name: "info", type: 1 }, { name: "info", type: 2 }, { name: "info" }]);
    expect(out).toEqual([
      { name: "info", type: 1 },
      { name: "info", type: 2 },
    ]);
  });
});

describe("StatsBody", () => {
  it("accepts server_count and its two aliases, in that precedence", () => {
    expect(StatsBody.parse({ server_count: 1482 })).toEqual({ server_count: 1482 });
    expect(StatsBody.parse({ guilds: 12 })).toEqual({ server_count: 12 });
    expect(StatsBody.parse({ guildCount: 7 })).toEqual({ server_count: 7 });
    expect(StatsBody.parse({ guildCount: 7, server_count: 9 })).toEqual({ server_count: 9 });
    expect(StatsBody.parse({ server_count: 0 })).toEqual({ server_count: 0 });
  });

  it("refuses a string count", () => {
    expect(firstError(StatsBody, { server_count: "1482" })).toBe("server_count must be a number.");
    expect(firstError(StatsBody, { guilds: "12" })).toBe("guilds must be a number.");
  });

  it("refuses negative, fractional and unsafe integers", () => {
    expect(firstError(StatsBody, { server_count: -1 })).toBe("server_count must not be negative.");
    expect(firstError(StatsBody, { server_count: 1.5 })).toBe("server_count must be a whole number.");
    expect(StatsBody.safeParse({ server_count: 2 ** 53 }).success).toBe(false);
    expect(StatsBody.safeParse({ server_count: Number.MAX_SAFE_INTEGER }).success).toBe(true);
  });

  it("requires one of the three names", () => {
    expect(firstError(StatsBody, { shard_id: 0 })).toBe("server_count is required.");
    expect(firstError(StatsBody, "12")).toBe("The body must be a JSON object.");
  });

  it("ignores the extra fields client libraries send", () => {
    expect(StatsBody.parse({ server_count: 5, shard_id: 0, shard_count: 2, shards: [2, 3] })).toEqual({
      server_count: 5,
    });
    expect(StatsBody.parse({ guilds: 5, users: 100, voice_connections: 1 })).toEqual({ server_count: 5 });
  });
});

describe("CheckQuery", () => {
  it("accepts 17 to 20 digit user ids and refuses others", () => {
    expect(CheckQuery.safeParse({ userId: "12345678901234567" }).success).toBe(true);
    expect(CheckQuery.safeParse({ userId: "12345678901234567890" }).success).toBe(true);
    expect(CheckQuery.safeParse({ userId: "1234567890123456" }).success).toBe(false);
    expect(CheckQuery.safeParse({ userId: "123456789012345678901" }).success).toBe(false);
    expect(CheckQuery.safeParse({ userId: "12345678901234567a" }).success).toBe(false);
  });

  it("names a missing userId", () => {
    const result = CheckQuery.safeParse({});
    expect(result.success).toBe(false);
    if (!result.success)
      expect(describeIssue(result.error.issues[0]!, "The query", {})).toBe("userId is required.");
  });
});

describe("clampLimit", () => {
  it("clamps to 1..100 and falls back to 50 for anything that is not a number", () => {
    expect(clampLimit(undefined)).toBe(50);
    expect(clampLimit("abc")).toBe(50);
    expect(clampLimit("")).toBe(50);
    expect(clampLimit("0")).toBe(1);
    expect(clampLimit("-5")).toBe(1);
    expect(clampLimit("1000")).toBe(100);
    expect(clampLimit("7")).toBe(7);
    expect(clampLimit("7.9")).toBe(7);
    expect(clampLimit(["3", "4"])).toBe(3);
  });
});

describe("CastVoteBody", () => {
  it("validates both ids", () => {
    expect(
      CastVoteBody.safeParse({ bot_id: "123456789012345678", user_id: "223456789012345678" }).success,
    ).toBe(true);
    expect(firstError(CastVoteBody, { bot_id: "12", user_id: "223456789012345678" })).toBe(
      "bot_id must be a bot application id (17 to 19 digits).",
    );
  });
});
