import { TargetRefused } from "@botdir/schema";
import { checkTarget, classifyError } from "./http-client.js";

describe("checkTarget (before connecting)", () => {
  it.each([
    "https://127.0.0.1/hook",
    "https://2130706433/hook",
    "https://0x7f000001/hook",
    "https://0177.0.0.1/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://10.1.2.3/hook",
    "https://100.64.0.1/hook",
    "http://93.184.215.14/hook",
    "https://user:pass@93.184.215.14/hook",
    "not a url",
    "ftp://93.184.215.14/hook",
  ])("refuses %s when private targets are not allowed", (url) => {
    expect(checkTarget(url, false).ok).toBe(false);
  });

  it("accepts https to a public address or a host name (names are checked at connect time)", () => {
    expect(checkTarget("https://93.184.215.14/hook", false).ok).toBe(true);
    expect(checkTarget("https://hooks.example.com/vote", false).ok).toBe(true);
  });

  it("allows http and loopback when private targets are allowed", () => {
    expect(checkTarget("http://127.0.0.1:8080/hook", true).ok).toBe(true);
    expect(checkTarget("http://[::1]:8080/hook", true).ok).toBe(true);
  });
});

describe("classifyError", () => {
  it.each([
    [new TargetRefused("refused"), "refused_target"],
    [
      Object.assign(new Error("x"), { name: "RequestError", cause: new TargetRefused("r") }),
      "refused_target",
    ],
    [
      Object.assign(new Error("Timeout awaiting 'request'"), { name: "TimeoutError", code: "ETIMEDOUT" }),
      "timeout",
    ],
    [Object.assign(new Error("getaddrinfo ENOTFOUND x"), { code: "ENOTFOUND" }), "dns"],
    [Object.assign(new Error("self-signed"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" }), "tls"],
    [Object.assign(new Error("wrong version"), { code: "ERR_SSL_WRONG_VERSION_NUMBER" }), "tls"],
    [Object.assign(new Error("refused"), { code: "ECONNREFUSED" }), "connection"],
    [Object.assign(new Error("reset"), { code: "ECONNRESET" }), "connection"],
  ])("classifies %s as %s", (error, kind) => {
    expect(classifyError(error)).toBe(kind);
  });
});
