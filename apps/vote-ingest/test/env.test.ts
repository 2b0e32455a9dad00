import { parseEnv } from "@botdir/service-kit";
import { IngestEnv } from "../src/env.js";

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
});
