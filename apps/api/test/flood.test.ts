/**
 * The flood budget (src/http/flood-budget.ts) on a real listener with a fresh token set: requests
 * that need I/O before their refusal or answer (an unknown token waiting for the set's barrier, a
 * badge this process does not hold) are shed with 503 and Retry-After while the event loop lags
 * past the threshold, or past their cap in flight; a valid token is never shed.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBotId, seedBot } from "@botdir/db/testing";
import type { ApiDeps } from "../src/deps.js";
import { OVERLOADED_MESSAGE } from "../src/http/flood-budget.js";
import { createApiMetrics } from "../src/metrics.js";
import { USER, useHarness, useTokenSets } from "./support.js";

const { h } = useHarness();
const tokenSets = useTokenSets(h);
const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
});

const randomToken = () => randomBytes(32).toString("base64url");

async function listen(deps: Partial<ApiDeps>): Promise<string> {
  const server = createServer(h.app(deps));
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface Answer {
  status: number;
  retryAfter: string | null;
  body: string;
}

async function get(url: string, token?: string): Promise<Answer> {
  const res = await fetch(url, token === undefined ? {} : { headers: { Authorization: token } });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.text() };
}

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {}
}

/** Holds the loop for `ms` at every turn (after the poll phase) until the returned stop is called. */
function starveLoop(ms: number): () => void {
  let hogging = true;
  const hog = () => {
    busy(ms);
    if (hogging) setImmediate(hog);
  };
  setImmediate(hog);
  return () => {
    hogging = false;
  };
}

/** Resolves once the loop has lagged long enough for the budget to see it (two late ticks). */
const lagSeen = () => new Promise((resolve) => setTimeout(resolve, 400));

async function sampleValue(metrics: ReturnType<typeof createApiMetrics>, name: string, label: string) {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => v.labels.class === label)?.value ?? 0;
}

describe("a flood of unknown tokens while the event loop starves", () => {
  it("when the loop lags past the threshold, then the unknown tokens get 503 with Retry-After and the spec's body, and a valid token's requests are all answered", async () => {
    const metrics = createApiMetrics();
    const base = await listen({ tokens: await tokenSets.fresh(), metrics, flood: { lagThresholdMs: 50 } });
    const bot = await seedBot(h.t.db);
    const check = `${base}/api/v1/bots/${bot.id}/check?userId=${USER}`;

    const stop = starveLoop(120);
    let flood: Answer[];
    let valid: Answer[];
    try {
      await lagSeen();
      [flood, valid] = await Promise.all([
        Promise.all(Array.from({ length: 60 }, () => get(check, randomToken()))),
        Promise.all(Array.from({ length: 10 }, () => get(check, bot.token ?? ""))),
      ]);
    } finally {
      stop();
    }

    expect(valid.map((a) => a.status)).toEqual(Array(10).fill(200));
    const shed = flood.filter((a) => a.status === 503);
    expect(shed.length).toBeGreaterThan(0);
    expect(flood.every((a) => a.status === 503 || a.status === 401)).toBe(true);
    for (const answer of shed) {
      expect(answer.retryAfter).toMatch(/^[1-9][0-9]*$/);
      expect(JSON.parse(answer.body)).toEqual({ error: OVERLOADED_MESSAGE });
    }
    expect(await sampleValue(metrics, "botdir_flood_shed_total", "unknown_token")).toBe(shed.length);
  });

  it("when the loop does not lag, then an unknown token gets its 401", async () => {
    const base = await listen({ tokens: await tokenSets.fresh(), flood: { lagThresholdMs: 1_000 } });
    const bot = await seedBot(h.t.db);
    const answer = await get(`${base}/api/v1/bots/${bot.id}/check?userId=${USER}`, randomToken());
    expect(answer.status).toBe(401);
  });

  it("when more unknown tokens wait for the barrier than the cap allows, then the rest are shed at once", async () => {
    const metrics = createApiMetrics();
    const base = await listen({
      tokens: await tokenSets.fresh(),
      metrics,
      flood: { lagThresholdMs: 60_000, maxPending: { unknown_token: 1 } },
    });
    const bot = await seedBot(h.t.db);
    const url = `${base}/api/v1/bots/${bot.id}/check?userId=${USER}`;
    const answers = await Promise.all(Array.from({ length: 20 }, () => get(url, randomToken())));
    const statuses = answers.map((a) => a.status);
    expect(statuses).toContain(401);
    expect(statuses).toContain(503);
    expect(statuses.every((s) => s === 401 || s === 503)).toBe(true);
  });
});

describe("badges under a starved loop", () => {
  it("when the loop lags, then an id this process does not hold is shed with 503, and one it holds is answered", async () => {
    const metrics = createApiMetrics();
    const base = await listen({ metrics, flood: { lagThresholdMs: 50 } });
    const held = randomBotId();
    // Not listed: remembered by the process.
    expect((await get(`${base}/widget/${held}.svg`)).status).toBe(200);

    const stop = starveLoop(120);
    let fresh: Answer;
    let again: Answer;
    try {
      await lagSeen();
      [fresh, again] = await Promise.all([
        get(`${base}/widget/${randomBotId()}.svg`),
        get(`${base}/widget/${held}.svg`),
      ]);
    } finally {
      stop();
    }
    expect(fresh.status).toBe(503);
    expect(fresh.retryAfter).not.toBeNull();
    expect(JSON.parse(fresh.body)).toEqual({ error: OVERLOADED_MESSAGE });
    expect(again.status).toBe(200);
    expect(await sampleValue(metrics, "botdir_flood_shed_total", "widget")).toBe(1);
  });
});
