import { checkWebhookUrl, classifyAddress, createSafeLookup, type Resolver } from "./net.js";

const strict = { allowPrivate: false };
const fixed =
  (answers: Record<string, string[]>): Resolver =>
  async (host) => {
    const found = answers[host];
    if (!found) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
    return found;
  };

describe("classifyAddress", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "linkLocal"],
    ["100.64.0.1", "carrierGradeNat"],
    ["224.0.0.1", "multicast"],
    ["0.0.0.0", "unspecified"],
    ["255.255.255.255", "broadcast"],
    ["::1", "loopback"],
    ["::", "unspecified"],
    ["fe80::1", "linkLocal"],
    ["fd00::1", "uniqueLocal"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:10.0.0.1", "private"],
    ["64:ff9b::7f00:1", "rfc6052"],
    ["2002:7f00:1::", "6to4"],
  ])("refuses %s (%s)", (ip, range) => {
    expect(classifyAddress(ip)).toEqual({ ok: false, range });
  });

  it.each(["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "[2606:4700:4700::1111]"])(
    "accepts %s",
    (ip) => {
      expect(classifyAddress(ip)).toEqual({ ok: true });
    },
  );
});

describe("checkWebhookUrl", () => {
  it.each([
    "https://127.0.0.1/hook",
    "https://2130706433/hook",
    "https://0177.0.0.1/hook",
    "https://0x7f.0.0.1/hook",
    "https://0x7f000001/hook",
    "https://127.1/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[::ffff:7f00:1]/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://10.0.0.5/hook",
    "https://100.100.100.100/hook",
    "https://localhost/hook",
    "https://api.localhost/hook",
    "https://LOCALHOST./hook",
    "https://intranet/hook",
  ])("refuses %s", async (url) => {
    const verdict = await checkWebhookUrl(url, strict, fixed({}));
    expect(verdict.ok).toBe(false);
  });

  it("refuses http, other schemes, credentials and garbage with a sentence", async () => {
    expect(await checkWebhookUrl("http://example.com/hook", strict, null)).toEqual({
      ok: false,
      reason: "The webhook URL must use https.",
    });
    expect((await checkWebhookUrl("ftp://example.com", strict, null)).ok).toBe(false);
    expect((await checkWebhookUrl("https://user:pw@example.com/", strict, null)).ok).toBe(false);
    expect(await checkWebhookUrl("not a url", strict, null)).toEqual({
      ok: false,
      reason: "The webhook URL is not a valid URL.",
    });
  });

  it("names the schemes it accepts: https only, or http and https when private targets are allowed", async () => {
    expect(await checkWebhookUrl("ftp://x", strict, null)).toEqual({
      ok: false,
      reason: "The webhook URL must use https.",
    });
    expect(await checkWebhookUrl("ftp://x", { allowPrivate: true }, null)).toEqual({
      ok: false,
      reason: "The webhook URL must use http or https.",
    });
  });

  it("refuses a host name whose DNS answer is private, and accepts a public one", async () => {
    const resolver = fixed({
      "evil.example": ["93.184.216.34", "10.0.0.1"],
      "good.example": ["93.184.216.34"],
    });
    expect((await checkWebhookUrl("https://evil.example/x", strict, resolver)).ok).toBe(false);
    expect(await checkWebhookUrl("https://good.example/x", strict, resolver)).toEqual({
      ok: true,
      url: "https://good.example/x",
    });
  });

  it("accepts a name that does not resolve yet (the dispatcher checks again at connect time)", async () => {
    expect((await checkWebhookUrl("https://not-yet.example/x", strict, fixed({}))).ok).toBe(true);
  });

  it("allows http and loopback only when private targets are allowed", async () => {
    expect((await checkWebhookUrl("http://127.0.0.1:8080/hook", { allowPrivate: true }, null)).ok).toBe(true);
    expect((await checkWebhookUrl("http://127.0.0.1:8080/hook", strict, null)).ok).toBe(false);
  });
});

describe("createSafeLookup", () => {
  function run(lookup: ReturnType<typeof createSafeLookup>, host: string, options: object = {}) {
    return new Promise<{ error: Error | null; address: unknown; family?: number }>((resolve) => {
      lookup(host, options, (error, address, family) => resolve({ error, address, family }));
    });
  }

  it("hands the socket the checked public address", async () => {
    const lookup = createSafeLookup(strict, fixed({ "hook.example": ["93.184.216.34"] }));
    expect(await run(lookup, "hook.example")).toEqual({ error: null, address: "93.184.216.34", family: 4 });
    expect(await run(lookup, "hook.example", { all: true })).toMatchObject({
      address: [{ address: "93.184.216.34", family: 4 }],
    });
  });

  it("refuses when the answer is private, e.g. after DNS rebinding", async () => {
    let calls = 0;
    const rebinding: Resolver = async () => (calls++ === 0 ? ["93.184.216.34"] : ["127.0.0.1"]);
    const verdict = await checkWebhookUrl("https://rebind.example/", strict, rebinding);
    expect(verdict.ok).toBe(true);
    const result = await run(createSafeLookup(strict, rebinding), "rebind.example");
    expect(result.error?.message).toMatch(/loopback/);
    expect((result.error as { code?: string }).code).toBe("ETARGETREFUSED");
  });

  it("passes private answers through when private targets are allowed", async () => {
    const lookup = createSafeLookup({ allowPrivate: true }, fixed({ dev: ["127.0.0.1"] }));
    expect((await run(lookup, "dev")).address).toBe("127.0.0.1");
  });
});
