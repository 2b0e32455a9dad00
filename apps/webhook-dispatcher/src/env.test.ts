import { DEFAULT_QUEUE_PREFIX, parseEnv } from "@botdir/schema";
import { DispatcherEnv } from "./env.js";

const key = "ab".repeat(32);

describe("dispatcher environment", () => {
  it("defaults to the spec's schedule, the production queue prefix and private targets refused", () => {
    const env = parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key });
    expect(env.WEBHOOK_TIMEOUT_MS).toBe(10_000);
    expect(env.WEBHOOK_RETRY_DELAYS_MS).toEqual([60_000, 300_000, 1_800_000, 7_200_000]);
    expect(env.WEBHOOK_ALLOW_PRIVATE_TARGETS).toBe(false);
    expect(env.QUEUE_PREFIX).toBe(DEFAULT_QUEUE_PREFIX);
    expect(env.DISPATCHER_CONCURRENCY).toBe(100);
    // Two short statements per attempt: 20 connections keep 50 attempts in flight from queueing.
    expect(env.DB_POOL_MAX).toBe(20);
    expect(parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, DB_POOL_MAX: "8" }).DB_POOL_MAX).toBe(8);
  });

  it("when SECRET_ENCRYPTION_KEY is missing, then start-up fails naming it, even in tests", () => {
    expect(() => parseEnv(DispatcherEnv, { NODE_ENV: "test" })).toThrow(
      "Invalid environment: SECRET_ENCRYPTION_KEY is required.",
    );
  });

  it("when the retry delays are not four numbers, then start-up fails naming the variable", () => {
    expect(() =>
      parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_RETRY_DELAYS_MS: "1,2,3" }),
    ).toThrow(/WEBHOOK_RETRY_DELAYS_MS/);
  });
});
