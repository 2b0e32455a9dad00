import { parseEnv } from "@botdir/service-kit";
import { CliEnv, IngestEnv } from "../src/env.js";

const base = {
  NODE_ENV: "production",
  SECRET_ENCRYPTION_KEY: "ab".repeat(32),
};

describe("vote-ingest environment", () => {
  it("when INTERNAL_API_KEY ends with a newline (a Secret made from a file), then start-up is refused with one line", () => {
    expect(() => parseEnv(IngestEnv, { ...base, INTERNAL_API_KEY: `${"k".repeat(32)}\n` })).toThrow(
      "Invalid environment: INTERNAL_API_KEY must not start or end with whitespace (a trailing newline?).",
    );
    expect(() => parseEnv(IngestEnv, { ...base, INTERNAL_API_KEY: ` ${"k".repeat(32)}` })).toThrow(
      /INTERNAL_API_KEY must not start or end with whitespace/,
    );
  });

  it("when INTERNAL_API_KEY has no surrounding whitespace, then it is taken as is", () => {
    const key = `ik_${"k".repeat(32)}`;
    expect(parseEnv(IngestEnv, { ...base, INTERNAL_API_KEY: key }).INTERNAL_API_KEY).toBe(key);
  });

  it("reads the drain, the listener timeouts and the pool's connect timeout, with their defaults", () => {
    const env = parseEnv(IngestEnv, { ...base, INTERNAL_API_KEY: "k".repeat(32) });
    expect(env).toMatchObject({
      SHUTDOWN_DRAIN_MS: 5_000,
      DB_CONNECT_TIMEOUT_MS: 500,
      HTTP_KEEP_ALIVE_TIMEOUT_MS: 65_000,
      HTTP_HEADERS_TIMEOUT_MS: 66_000,
      HTTP_REQUEST_TIMEOUT_MS: 90_000,
    });
  });

  it("reads DELIVERY_JOB_BATCH_MAX (default 16, from 1 to 32) and refuses other values with one line naming it", () => {
    const env = (value?: string) =>
      parseEnv(IngestEnv, {
        ...base,
        INTERNAL_API_KEY: "k".repeat(32),
        ...(value === undefined ? {} : { DELIVERY_JOB_BATCH_MAX: value }),
      });
    expect(env().DELIVERY_JOB_BATCH_MAX).toBe(16);
    expect(env("1").DELIVERY_JOB_BATCH_MAX).toBe(1);
    expect(env("32").DELIVERY_JOB_BATCH_MAX).toBe(32);
    for (const bad of ["0", "33", "4.5", "many"]) {
      expect(() => env(bad)).toThrow(/^Invalid environment: DELIVERY_JOB_BATCH_MAX /);
    }
  });

  it("when REDIS_CLUSTER_NODES is set and QUEUE_PREFIX has no {hash tag}, then vote-ingest and botctl refuse to start with one line", () => {
    const cluster = { ...base, INTERNAL_API_KEY: "k".repeat(32), REDIS_CLUSTER_NODES: "10.0.0.1:6379" };
    const line =
      "Invalid environment: QUEUE_PREFIX must contain a {hash tag}, e.g. {botdir}, when REDIS_CLUSTER_NODES is set.";
    for (const prefix of ["botdir", "{}botdir", "bot}dir{"]) {
      expect(() => parseEnv(IngestEnv, { ...cluster, QUEUE_PREFIX: prefix })).toThrow(line);
      expect(() => parseEnv(CliEnv, { ...cluster, QUEUE_PREFIX: prefix })).toThrow(line);
    }
    expect(parseEnv(IngestEnv, cluster).QUEUE_PREFIX).toBe("{botdir}");
    expect(parseEnv(IngestEnv, { ...cluster, QUEUE_PREFIX: "staging{q}" }).QUEUE_PREFIX).toBe("staging{q}");
    // One Redis server has no slots: any prefix works there.
    expect(
      parseEnv(IngestEnv, { ...base, INTERNAL_API_KEY: "k".repeat(32), QUEUE_PREFIX: "botdir" }).QUEUE_PREFIX,
    ).toBe("botdir");
  });
});
