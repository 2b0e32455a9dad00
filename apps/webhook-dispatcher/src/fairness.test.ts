import { createFairness, MIN_RETRY_MS, originKey, originOf, webhookKey } from "./fairness.js";

const limits = { perWebhook: 2, perOrigin: 3, holdMs: 10_000 };

function setup() {
  let now = 1_000;
  const fairness = createFairness<string>(limits, () => now);
  return { fairness, advance: (ms: number) => (now += ms) };
}

function admitted(fairness: ReturnType<typeof setup>["fairness"], botId: string) {
  const admission = fairness.admit(botId);
  if (!admission.ok) throw new Error(`expected ${botId} to be admitted, got cap ${admission.cap}`);
  return admission.ticket;
}

describe("originOf", () => {
  it.each([
    ["https://Hooks.Example.com/a/b?c", "https://hooks.example.com"],
    ["https://hooks.example.com:443/x", "https://hooks.example.com"],
    ["https://hooks.example.com:8443/x", "https://hooks.example.com:8443"],
    ["http://127.0.0.1:3000/hook", "http://127.0.0.1:3000"],
    ["not a url", null],
  ])("%s is origin %s", (url, origin) => {
    expect(originOf(url)).toBe(origin);
  });
});

describe("per-webhook and per-origin caps", () => {
  it("when a webhook has its cap in flight, then the next job is refused on that webhook until one ends", () => {
    const { fairness } = setup();
    const first = admitted(fairness, "bot-a");
    admitted(fairness, "bot-a");

    const refused = fairness.admit("bot-a");
    expect(refused).toMatchObject({ ok: false, cap: "webhook", key: webhookKey("bot-a") });
    // Another bot is not affected.
    expect(fairness.admit("bot-b").ok).toBe(true);

    expect(fairness.release(first)).toEqual([webhookKey("bot-a")]);
    expect(fairness.admit("bot-a").ok).toBe(true);
  });

  it("when bots share an origin, then the origin's cap applies across them once their origin is known", () => {
    const { fairness } = setup();
    for (const bot of ["b1", "b2", "b3", "b4"]) {
      const ticket = admitted(fairness, bot);
      fairness.learn(ticket, `https://provider.example/hooks/${bot}`);
      fairness.release(ticket);
    }
    const held = ["b1", "b2", "b3"].map((bot) => admitted(fairness, bot));

    expect(fairness.admit("b4")).toMatchObject({
      ok: false,
      cap: "origin",
      key: originKey("https://provider.example"),
    });

    expect(fairness.release(held[0]!)).toEqual([webhookKey("b1"), originKey("https://provider.example")]);
    expect(fairness.admit("b4").ok).toBe(true);
  });

  it("when a bot's origin is not known yet, then its first job is admitted and counts against the origin from its claim on", () => {
    const { fairness } = setup();
    for (const bot of ["k1", "k2"]) fairness.learn(admitted(fairness, bot), "https://provider.example/x");
    expect(fairness.snapshot().atCap.origin).toBe(0);

    const fresh = admitted(fairness, "new-bot");
    fairness.learn(fresh, "https://provider.example/new");

    expect(fairness.snapshot().atCap.origin).toBe(1);
    expect(fairness.admit("k1")).toMatchObject({ ok: false, cap: "origin" });
  });

  it("when a refused job is parked, then the one parked longest is handed back first", () => {
    const { fairness } = setup();
    fairness.park(webhookKey("a"), "job-1");
    fairness.park(webhookKey("a"), "job-2");
    expect(fairness.snapshot().parked).toEqual({ webhook: 2, origin: 0 });

    expect(fairness.unpark(webhookKey("a"))).toBe("job-1");
    expect(fairness.unpark(webhookKey("a"))).toBe("job-2");
    expect(fairness.unpark(webhookKey("a"))).toBeUndefined();
  });

  it("when a job is refused, then its fallback delay is when the oldest slot holder must have ended, never below the minimum", () => {
    const { fairness, advance } = setup();
    admitted(fairness, "a");
    advance(4_000);
    admitted(fairness, "a");

    const refused = fairness.admit("a");
    if (refused.ok) throw new Error("expected a refusal");
    // Oldest started 4 s ago, slots are held up to 10 s: about 6 s left (±10 % jitter).
    expect(refused.retryInMs).toBeGreaterThanOrEqual(5_400);
    expect(refused.retryInMs).toBeLessThanOrEqual(6_600);

    advance(20_000);
    const late = fairness.admit("a");
    if (late.ok) throw new Error("expected a refusal");
    expect(late.retryInMs).toBeGreaterThanOrEqual(MIN_RETRY_MS * 0.9);
    expect(late.retryInMs).toBeLessThanOrEqual(MIN_RETRY_MS * 1.1);
  });

  it("when a ticket is released twice, then the second release frees nothing", () => {
    const { fairness } = setup();
    const t = admitted(fairness, "a");
    admitted(fairness, "a");
    expect(fairness.release(t)).toEqual([webhookKey("a")]);
    expect(fairness.release(t)).toEqual([]);
    expect(fairness.hasRoom(webhookKey("a"))).toBe(true);
  });
});
