import { MAX_SHARD_COUNT, parseOrThrow, StatsBody } from "./index.js";

function firstError(value: unknown): string {
  try {
    parseOrThrow(StatsBody, value);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("expected a validation error");
}

describe("StatsBody with per-shard counts", () => {
  it("sums server_count when it is an array of per-shard counts", () => {
    expect(StatsBody.parse({ server_count: [100, 250, 0] })).toEqual({ server_count: 350 });
  });

  it("uses the sum of a non-empty shards array before the names (top.gg .NET sends server_count 0 beside it)", () => {
    expect(StatsBody.parse({ shards: [10, 20], shard_id: 0, shard_count: 2, server_count: 0 })).toEqual({
      server_count: 30,
    });
    expect(StatsBody.parse({ shards: [7, 8] })).toEqual({ server_count: 15 });
  });

  it("ignores shards when it is a shard count (a number) or an empty array", () => {
    expect(StatsBody.parse({ guilds: 5, shards: 2 })).toEqual({ server_count: 5 });
    expect(StatsBody.parse({ server_count: 9, shards: [] })).toEqual({ server_count: 9 });
  });

  it("names the bad element of a per-shard array", () => {
    expect(firstError({ server_count: [1, "2"] })).toBe("server_count[1] must be a number.");
    expect(firstError({ shards: [1, -2] })).toBe("shards[1] must not be negative.");
  });

  it("refuses per-shard counts whose sum is not a safe integer", () => {
    expect(firstError({ server_count: [Number.MAX_SAFE_INTEGER, 1] })).toBe(
      "server_count must add up to a safe integer.",
    );
  });

  it("still refuses a string, a fractional and a null count with the same sentences", () => {
    expect(firstError({ server_count: "1482" })).toBe("server_count must be a number.");
    expect(firstError({ server_count: 1.5 })).toBe("server_count must be a whole number.");
    expect(firstError({ server_count: null })).toBe("server_count must be a number.");
    expect(firstError({ shard_id: 0 })).toBe("server_count is required.");
  });
});

describe("StatsBody with a shard id (per-shard posts)", () => {
  it("when a shard posts its count in any client's spelling, then the count is that shard's", () => {
    expect(StatsBody.parse({ server_count: 10, shard_id: 1, shard_count: 3 })).toEqual({
      server_count: 10,
      shard: { id: 1, count: 3 },
    });
    expect(StatsBody.parse({ guildCount: 10, shardId: 0, shardCount: 2 })).toEqual({
      server_count: 10,
      shard: { id: 0, count: 2 },
    });
    // discordbotlist.com clients send the shard id without a shard count.
    expect(StatsBody.parse({ guilds: 10, shard_id: 4 })).toEqual({
      server_count: 10,
      shard: { id: 4, count: null },
    });
  });

  it("when the post carries a per-shard array or no shard id, then it is a total", () => {
    expect(StatsBody.parse({ shards: [1, 2], shard_id: 0, shard_count: 2 })).toEqual({ server_count: 3 });
    expect(StatsBody.parse({ server_count: [4, 5], shard_id: 1 })).toEqual({ server_count: 9 });
    expect(StatsBody.parse({ guildCount: 8, shardCount: 4 })).toEqual({ server_count: 8 });
    expect(StatsBody.parse({ server_count: 8, shard_id: null, shard_count: null })).toEqual({
      server_count: 8,
    });
  });

  it("when the shard id or count is out of range or not a whole number, then one sentence names it", () => {
    expect(firstError({ server_count: 1, shard_id: 3, shard_count: 3 })).toBe(
      "shard_id must be less than shard_count (3).",
    );
    expect(firstError({ guildCount: 1, shardId: 2, shardCount: 2 })).toBe(
      "shardId must be less than shardCount (2).",
    );
    expect(firstError({ server_count: 1, shard_id: -1, shard_count: 3 })).toBe(
      "shard_id must not be negative.",
    );
    expect(firstError({ server_count: 1, shard_id: "0", shard_count: 3 })).toBe("shard_id must be a number.");
    expect(firstError({ server_count: 1, shard_id: 0.5 })).toBe("shard_id must be a whole number.");
    expect(firstError({ server_count: 1, shard_id: 0, shard_count: 0 })).toBe(
      "shard_count must be at least 1.",
    );
    expect(firstError({ server_count: 1, shard_id: 0, shard_count: MAX_SHARD_COUNT + 1 })).toBe(
      `shard_count must be at most ${MAX_SHARD_COUNT}.`,
    );
  });
});
