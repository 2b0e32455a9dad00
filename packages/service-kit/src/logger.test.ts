import { loggerOptions } from "./http.js";

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
    expect(options.redact.paths.length).toBeGreaterThan(0);
  });
});
