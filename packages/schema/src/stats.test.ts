import { parseOrThrow, StatsBody } from "./index.js";

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
