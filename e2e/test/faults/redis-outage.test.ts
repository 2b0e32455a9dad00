/**
 * Fault: the Redis server is SIGKILLed while the three real apps are under load, then comes back
 * EMPTY (nothing persisted). PostgreSQL carries the truth, so nothing a client was told succeeded
 * is lost, and the public endpoints keep answering.
 */
import { randomUserId } from "@botdir/db/testing";
import { DEFAULT_LIMITS } from "../../../apps/api/src/services/ratelimit.js";
import { call, waitFor } from "../../src/processes.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({ privateRedis: true });

/** Requests the load sends in each phase (half of them /stats). */
const PHASE_REQUESTS = { before: 30, outage: 50, after: 30 } as const;

/** A promise opened once, from outside. */
function gate(): { opened: Promise<void>; open(): void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

interface Sample {
  path: string;
  status: number;
  ms: number;
  phase: "before" | "outage" | "after";
}

describe("Redis killed under load", () => {
  it("when Redis dies and restarts empty, then /check and /stats answer 2xx throughout, health reports Redis down, a bad token is still 401, and votes cast meanwhile are delivered", async () => {
    expect((PHASE_REQUESTS.before + PHASE_REQUESTS.outage + PHASE_REQUESTS.after) / 2).toBeLessThanOrEqual(
      DEFAULT_LIMITS.stats,
    );
    const bot = await stack.webhookBot(stack.receiver.url("/hook"));
    const auth = { authorization: `Bearer ${bot.token}` };
    const voter = randomUserId();

    // Everything works before the fault: a vote reaches the receiver.
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    await waitFor(() => stack.receiver.requests.length === 1, "the first webhook", 20_000);

    // The load stays inside the token's limits, so that any refusal is a fault: each phase sends at
    // most PHASE_REQUESTS[phase] requests, alternately /stats and /check, then waits for the next
    // phase. Counted in Redis, locally while Redis is away, or both, the /stats requests of the
    // whole test fit in one window's limit (60 a minute).
    let phase: Sample["phase"] = "before";
    let loading = true;
    let phaseChanged = gate();
    const setPhase = (next: Sample["phase"]) => {
      phase = next;
      phaseChanged.open();
      phaseChanged = gate();
    };
    const sent: Record<Sample["phase"], number> = { before: 0, outage: 0, after: 0 };
    const samples: Sample[] = [];
    const errors: string[] = [];
    const loader = async () => {
      while (loading) {
        const at = phase;
        if (sent[at] >= PHASE_REQUESTS[at]) {
          await phaseChanged.opened;
          continue;
        }
        const stats = sent[at]++ % 2 === 0;
        const path = stats ? `/api/v1/bots/${bot.id}/stats` : `/api/v1/bots/${bot.id}/check?userId=${voter}`;
        try {
          const r = await call(`${stack.api.base}${path}`, {
            method: stats ? "POST" : "GET",
            headers: auth,
            ...(stats ? { body: { server_count: sent[at] } } : {}),
            timeoutMs: 5_000,
          });
          samples.push({ path: stats ? "stats" : "check", status: r.status, ms: r.ms, phase: at });
        } catch (error) {
          errors.push(`${path}: ${(error as Error).message}`);
        }
      }
    };
    const load = Promise.all([0, 1, 2, 3].map(loader));
    /** Waits until the load has answered `count` requests sent in `at`. */
    const sampled = (at: Sample["phase"], count: number, what: string) =>
      waitFor(() => samples.filter((s) => s.phase === at).length >= count, what, 15_000);
    await sampled("before", 20, "load before the fault");

    await stack.redis.kill();
    setPhase("outage");
    await sampled("outage", 40, "load during the outage");

    const health = await call(`${stack.api.base}/api/health`);
    const badToken = await call(`${stack.api.base}/api/v1/bots/${bot.id}/check?userId=${voter}`, {
      headers: { authorization: "Bearer not-the-token" },
    });
    const outageVoters = [randomUserId(), randomUserId(), randomUserId()];
    const outageVotes = await Promise.all(outageVoters.map((u) => stack.vote(bot.id, u)));

    await stack.redis.restart();
    setPhase("after");
    await sampled("after", PHASE_REQUESTS.after, "load after the restart");
    loading = false;
    phaseChanged.open();
    await load;

    expect(errors).toEqual([]);
    const refused = samples.filter((s) => s.status !== 200);
    // A refusal comes with the API's own error lines, which say why.
    const errorLines =
      refused.length === 0
        ? []
        : stack.api
            .output()
            .split("\n")
            .filter((l) => l.includes('"level":50'));
    expect({ refused, errorLines }).toEqual({ refused: [], errorLines: [] });
    expect(samples.filter((s) => s.phase === "outage" && s.path === "check").length).toBeGreaterThan(10);
    expect(samples.filter((s) => s.phase === "outage" && s.path === "stats").length).toBeGreaterThan(10);
    // Answered without waiting for Redis (the outage samples above were all answered before the
    // restart); the latency bound is an order of magnitude above the tens of milliseconds expected,
    // above the 2 s connect timeout of the fail-fast Redis options, and under the loader's 5 s.
    expect(Math.max(...samples.map((s) => s.ms))).toBeLessThan(4_000);

    expect(health.status).toBe(503);
    expect(health.body).toMatchObject({ status: "unavailable", checks: { postgres: "ok", redis: "down" } });
    expect(typeof (health.body as { error?: unknown }).error).toBe("string");
    expect(badToken.status).toBe(401);
    expect(badToken.body).toEqual({ error: "Invalid token." });
    expect(outageVotes.map((v) => v.status)).toEqual([201, 201, 201]);

    // The votes cast while Redis was down reach the receiver after it came back empty.
    await waitFor(
      () =>
        outageVoters.every((u) =>
          stack.receiver.requests.some((r) => JSON.parse(r.body.toString()).user_id === u),
        ),
      "the outage votes' webhooks",
      30_000,
      100,
    );
    const deliveries = await stack.deliveries(bot.id);
    await waitFor(
      async () => (await stack.deliveries(bot.id)).every((d) => d.state === "delivered"),
      "all delivered",
    );
    expect(deliveries).toHaveLength(4);
    await waitFor(
      async () => (await call(`${stack.api.base}/api/health`)).status === 200,
      "API health to recover",
      10_000,
    );
  });
});
