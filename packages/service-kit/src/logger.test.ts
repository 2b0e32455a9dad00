import { loggerOptions, redactSecrets } from "./http.js";

/**
 * Every place a secret may sit in a log record, written here rather than read from the code under
 * test: a path dropped from the redaction keeps its case here and fails it.
 */
const REDACTED_PATHS = [
  "authorization",
  "*.authorization",
  "headers.authorization",
  "headers.cookie",
  "req.headers.authorization",
  "req.headers.cookie",
  "token",
  "*.token",
  "secret",
  "*.secret",
  "webhookSecret",
  "*.webhookSecret",
  "webhook_secret",
  "*.webhook_secret",
  "internalApiKey",
  "*.internalApiKey",
  "password",
  "*.password",
  "body",
  "*.body",
  "req.body",
];
const CENSOR = "[redacted]";

describe("loggerOptions", () => {
  it("when stdout is a terminal outside production, then records go through pino-pretty", () => {
    const options = loggerOptions("api", "info", { nodeEnv: "development", tty: true });
    expect(options).toMatchObject({ name: "api", level: "info", transport: { target: "pino-pretty" } });
  });

  it("when running in production, then logs stay JSON lines even on a terminal", () => {
    expect(loggerOptions("api", "info", { nodeEnv: "production", tty: true })).not.toHaveProperty(
      "transport",
    );
  });

  it("when stdout is not a terminal (a pipe, a container log), then logs stay JSON lines", () => {
    const options = loggerOptions("api", "debug", { nodeEnv: "development", tty: false });
    expect(options).not.toHaveProperty("transport");
    expect(options.formatters.log).toBe(redactSecrets);
  });
});

describe("redactSecrets (every app's log records)", () => {
  /** A record holding `value` at `path`; `*` becomes an ordinary key. */
  function recordAt(path: string, value: string): Record<string, unknown> {
    const keys = path.split(".").map((k) => (k === "*" ? "anything" : k));
    const leaf = keys.pop() as string;
    const root: Record<string, unknown> = { msg: "oops", reqId: "r-1" };
    let at = root;
    for (const k of keys) {
      const next: Record<string, unknown> = { keep: "visible" };
      at[k] = next;
      at = next;
    }
    at[leaf] = value;
    return root;
  }

  it.each(REDACTED_PATHS)(
    "when a record carries %s, then the line has [redacted] there and nothing else changes",
    (path) => {
      const record = recordAt(path, "tok-secret");
      const before = JSON.stringify(record);

      const out = redactSecrets(record);

      const line = JSON.stringify(out);
      expect(line).not.toContain("tok-secret");
      expect(line).toBe(before.replace('"tok-secret"', `"${CENSOR}"`));
      expect(JSON.stringify(record)).toBe(before); // the caller's objects are not changed
    },
  );

  it("when a record holds no secret, then it is returned as it is (no copy)", () => {
    const record = {
      reqId: "r-1",
      method: "GET",
      route: "/x",
      status: 200,
      err: { message: "m", code: "E" },
    };
    expect(redactSecrets(record)).toBe(record);
  });

  it("when a record holds buffers, arrays and objects without listed keys, then they are passed through, not copied", () => {
    const buf = Buffer.from("token");
    const list = ["token", "body"];
    const record = { buf, list, a: { b: { c: 1 } } };
    const out = redactSecrets(record);
    expect(out).toBe(record);
    expect(out.buf).toBe(buf);
    expect(out.list).toBe(list);
  });
});
