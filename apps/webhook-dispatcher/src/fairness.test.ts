import type { DeliverResult } from "./deliver.handler.js";
import {
  createFairness,
  MIN_RETRY_MS,
  originKey,
  originOf,
  paceOf,
  SLOW_WEBHOOK_CAP,
  webhookKey,
} from "./fairness.js";

const limits = { perWebhook: 2, perOrigin: 3, holdMs: 10_000, slowMs: 60_000 };

function setup(overrides: Partial<typeof limits> = {}) {
  let now = 1_000;
  const fairness = createFairness<string>({ ...limits, ...overrides }, () => now);
  /** One quick attempt of each bot: its webhook is known to be fast, so its full cap applies. */
  const warm = (...bots: string[]) => {
    for (const bot of bots) {
      const admission = fairness.admit(bot);
      if (!admission.ok) throw new Error(`expected ${bot} to be admitted`);
      fairness.release(admission.ticket, "fast");
    }
  };
  return { fairness, warm, advance: (ms: number) => (now += ms) };
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
    const { fairness, warm } = setup();
    warm("bot-a");
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
      fairness.release(ticket, "fast");
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
    for (const bot of ["k1", "k2"]) {
      const ticket = admitted(fairness, bot);
      fairness.learn(ticket, "https://provider.example/x");
      fairness.release(ticket, "fast");
      admitted(fairness, bot);
    }
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

    expect(fairness.parkedOn(webhookKey("a"))).toBe(2);
    expect(fairness.unpark(webhookKey("a"))).toBe("job-1");
    expect(fairness.unpark(webhookKey("a"))).toBe("job-2");
    expect(fairness.unpark(webhookKey("a"))).toBeUndefined();
    expect(fairness.parkedOn(webhookKey("a"))).toBe(0);
  });

  it("when a bot's webhook URL changes, then its ticket counts against the new origin", () => {
    const { fairness } = setup();
    const ticket = admitted(fairness, "m");
    fairness.learn(ticket, "https://one.example/hook");
    expect(fairness.room(originKey("https://one.example"))).toBe(2);
    fairness.learn(ticket, "https://two.example/hook");
    expect(fairness.room(originKey("https://one.example"))).toBe(3);
    expect(fairness.room(originKey("https://two.example"))).toBe(2);
  });

  it("when a job is refused, then its fallback delay is when the oldest slot holder must have ended, never below the minimum", () => {
    const { fairness, warm, advance } = setup();
    warm("a");
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
    const { fairness, warm } = setup();
    warm("a");
    const t = admitted(fairness, "a");
    admitted(fairness, "a");
    expect(fairness.release(t)).toEqual([webhookKey("a")]);
    expect(fairness.release(t)).toEqual([]);
    expect(fairness.hasRoom(webhookKey("a"))).toBe(true);
  });
});

describe("slow webhooks get one slot", () => {
  it("when a webhook has not answered in this replica yet, then it runs one attempt at a time until one answers quickly", () => {
    const { fairness } = setup();
    const first = admitted(fairness, "new");
    expect(fairness.admit("new")).toMatchObject({ ok: false, cap: "webhook" });
    expect(fairness.release(first, "fast")).toEqual([webhookKey("new")]);
    admitted(fairness, "new");
    admitted(fairness, "new");
    expect(fairness.admit("new")).toMatchObject({ ok: false, cap: "webhook" });
  });

  it("when a fast webhook's attempt has been running longer than slowMs, then no further attempt starts beside it", () => {
    const { fairness, warm, advance } = setup({ slowMs: 1_000 });
    warm("tarpit");
    const hanging = admitted(fairness, "tarpit");
    advance(999);
    expect(fairness.hasRoom(webhookKey("tarpit"))).toBe(true);
    advance(2);
    expect(fairness.admit("tarpit")).toMatchObject({ ok: false, cap: "webhook" });
    expect(fairness.snapshot().atCap.webhook).toBe(1);
    // It ended without an answer: one slot from now on, freed for the next job.
    expect(fairness.release(hanging, "slow")).toEqual([webhookKey("tarpit")]);
    admitted(fairness, "tarpit");
    expect(fairness.admit("tarpit")).toMatchObject({ ok: false, cap: "webhook" });
  });

  it("when a slow webhook answers quickly again, then its full cap is back; an attempt that made no request changes nothing", () => {
    const { fairness, warm } = setup();
    warm("w");
    const slow = admitted(fairness, "w");
    fairness.release(slow, "slow");
    const quick = admitted(fairness, "w");
    expect(fairness.admit("w").ok).toBe(false);
    fairness.release(quick, undefined);
    const again = admitted(fairness, "w");
    expect(fairness.admit("w").ok).toBe(false);
    fairness.release(again, "fast");
    admitted(fairness, "w");
    admitted(fairness, "w");
    expect(SLOW_WEBHOOK_CAP).toBe(1);
  });
});

describe("paceOf", () => {
  const retry = (errorKind: string | null): DeliverResult =>
    ({ kind: "retry", attemptNumber: 1, errorKind, nextAttemptAt: new Date() }) as DeliverResult;
  it.each([
    [{ kind: "delivered", attemptNumber: 1 } as DeliverResult, 50, "fast"],
    [{ kind: "delivered", attemptNumber: 1 } as DeliverResult, 2_500, "slow"],
    [retry("http_status"), 50, "fast"],
    [retry("http_status"), 2_500, "slow"],
    [retry("timeout"), 50, "slow"],
    [retry("dns"), 50, "slow"],
    [retry("connection"), 50, "slow"],
    [retry("tls"), 50, "slow"],
    [retry("refused_target"), 50, "fast"],
    [{ kind: "failed", attemptNumber: 5, errorKind: "timeout" } as DeliverResult, 50, "slow"],
    [{ kind: "wait", until: new Date() } as DeliverResult, 50, undefined],
    [{ kind: "done", reason: "delivered" } as DeliverResult, 50, undefined],
    [{ kind: "superseded", attemptNumber: 2 } as DeliverResult, 50, undefined],
  ])("%j after %i ms with slowMs 2000 is %s", (result, elapsed, pace) => {
    expect(paceOf(result, elapsed, 2_000)).toBe(pace);
  });
});
