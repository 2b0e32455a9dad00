import { DEFAULT_QUEUE_PREFIX } from "@botdir/schema";
import { keyRing, parseEnv } from "@botdir/service-kit";
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
    expect(env.WEBHOOK_RETENTION_DAYS).toBe(30);
    expect(env.WEBHOOK_RETENTION_INTERVAL_S).toBe(3_600);
    expect(parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, DB_POOL_MAX: "8" }).DB_POOL_MAX).toBe(8);
  });

  it("when SECRET_ENCRYPTION_KEY is missing, then start-up fails naming it, even in tests", () => {
    expect(() => parseEnv(DispatcherEnv, { NODE_ENV: "test" })).toThrow(
      "Invalid environment: SECRET_ENCRYPTION_KEY is required.",
    );
  });

  it.each(["14", "1"])(
    "when WEBHOOK_RETENTION_DAYS is %s (not above the 14-day recovery window), then start-up fails in one line naming it",
    (days) => {
      expect(() =>
        parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_RETENTION_DAYS: days }),
      ).toThrow(
        "Invalid environment: WEBHOOK_RETENTION_DAYS must be more than 14 (the recovery window, days): a recovery would send pruned delivered votes again.",
      );
    },
  );

  it("when WEBHOOK_RETENTION_DAYS is 15, then it is accepted", () => {
    const env = parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_RETENTION_DAYS: "15" });
    expect(env.WEBHOOK_RETENTION_DAYS).toBe(15);
  });

  it("when the retry delays are not four numbers, then start-up fails naming the variable", () => {
    expect(() =>
      parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_RETRY_DELAYS_MS: "1,2,3" }),
    ).toThrow(/WEBHOOK_RETRY_DELAYS_MS/);
  });

  it("when SECRET_ENCRYPTION_KEYS lists keys, then they form the ring in order and the single key is optional", () => {
    const other = "cd".repeat(32);
    const env = parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEYS: `${other},${key}` });
    expect(keyRing(env).map((k) => k.toString("hex"))).toEqual([other, key]);
    expect(keyRing(parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key })).length).toBe(1);
  });

  it("when a key of the ring is not exactly 32 bytes, then start-up fails with one line naming the variable", () => {
    // 44 characters of the base64 alphabet, which the old check accepted, decode to 33 bytes.
    expect(() => parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEYS: `${key},${"a".repeat(44)}` })).toThrow(
      /^Invalid environment: SECRET_ENCRYPTION_KEYS must be comma-separated 32-byte keys/,
    );
    expect(() => parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: "a".repeat(44) })).toThrow(
      /^Invalid environment: SECRET_ENCRYPTION_KEY must be 32 bytes/,
    );
    expect(() => parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key.slice(2) })).toThrow(
      /SECRET_ENCRYPTION_KEY/,
    );
  });

  it("when both SECRET_ENCRYPTION_KEY and SECRET_ENCRYPTION_KEYS are set, then start-up fails naming them", () => {
    expect(() =>
      parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, SECRET_ENCRYPTION_KEYS: key }),
    ).toThrow(/SECRET_ENCRYPTION_KEY must not be set together with SECRET_ENCRYPTION_KEYS/);
  });

  it("when the fairness caps and DNS settings are not set, then a small per-webhook cap, a higher per-origin cap and no fixed DNS deadline (derived from the timeout) apply", () => {
    const env = parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key });
    expect(env.DISPATCHER_MAX_IN_FLIGHT_PER_WEBHOOK).toBe(4);
    expect(env.DISPATCHER_MAX_IN_FLIGHT_PER_ORIGIN).toBe(32);
    expect(env.WEBHOOK_DNS_TIMEOUT_MS).toBeUndefined();
    expect(
      parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_DNS_SERVERS: "10.0.0.2, [::1]:53" })
        .WEBHOOK_DNS_SERVERS,
    ).toEqual(["10.0.0.2", "[::1]:53"]);
  });

  it("when the DNS deadline is not less than the attempt timeout, or a DNS server is not an address, then start-up fails naming the variable", () => {
    expect(() =>
      parseEnv(DispatcherEnv, {
        SECRET_ENCRYPTION_KEY: key,
        WEBHOOK_TIMEOUT_MS: "3000",
        WEBHOOK_DNS_TIMEOUT_MS: "3000",
      }),
    ).toThrow(/WEBHOOK_DNS_TIMEOUT_MS must be less than WEBHOOK_TIMEOUT_MS/);
    expect(() =>
      parseEnv(DispatcherEnv, { SECRET_ENCRYPTION_KEY: key, WEBHOOK_DNS_SERVERS: "dns.example" }),
    ).toThrow(/WEBHOOK_DNS_SERVERS/);
  });

  it("when REDIS_CLUSTER_NODES is set and QUEUE_PREFIX has no {hash tag}, then start-up is refused with one line", () => {
    const cluster = { SECRET_ENCRYPTION_KEY: key, REDIS_CLUSTER_NODES: "10.0.0.1:6379,10.0.0.2:6379" };
    expect(() => parseEnv(DispatcherEnv, { ...cluster, QUEUE_PREFIX: "botdir" })).toThrow(
      "Invalid environment: QUEUE_PREFIX must contain a {hash tag}, e.g. {botdir}, when REDIS_CLUSTER_NODES is set.",
    );
    expect(parseEnv(DispatcherEnv, { ...cluster, QUEUE_PREFIX: "{botdir-staging}" }).QUEUE_PREFIX).toBe(
      "{botdir-staging}",
    );
  });
});
