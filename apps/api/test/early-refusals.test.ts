/**
 * The early refusals (src/http/early-refusals.ts): with a fresh token set, the refusals that need no
 * I/O are answered before Express, with the same answer, request id, log line and metrics Express
 * would give; everything they cannot decide, and every non-canonical spelling of a route, goes to
 * Express.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { hashToken } from "@botdir/db";
import { seedBot, watchQueries } from "@botdir/db/testing";
import request from "supertest";
import { createEarlyRefusals, earlyRouteOf } from "../src/http/early-refusals.js";
import { createApiMetrics } from "../src/metrics.js";
import { createLimitNotes } from "../src/services/limit-notes.js";
import type { TokenSet } from "../src/services/token-set.js";
import { CapturingLogger, checkVote, USER, useHarness, useTokenSets } from "./support.js";

const { h } = useHarness();
const tokenSets = useTokenSets(h);

const randomToken = () => randomBytes(32).toString("base64url");

describe("which requests the early refusals may answer", () => {
  it("when a path is the canonical spelling of a token route with its method, then it is recognised with its route label and id", () => {
    expect(earlyRouteOf("GET", "/api/v1/bots/42/check?userId=1")).toEqual({
      route: { endpoint: "check", method: "GET", label: "/api/v1/bots/:id/check", body: false },
      pathId: "42",
    });
    expect(earlyRouteOf("GET", "/api/v1/bots/check?userId=1")?.route.label).toBe("/api/v1/bots/check");
    expect(earlyRouteOf("GET", "/api/v1/bots/42/votes")?.route.label).toBe("/api/v1/bots/:id/votes");
    expect(earlyRouteOf("GET", "/api/v1/bots/votes")?.pathId).toBeUndefined();
    expect(earlyRouteOf("POST", "/api/v1/bots/42/stats")?.route).toMatchObject({
      endpoint: "stats",
      body: true,
    });
    expect(earlyRouteOf("POST", "/api/v1/bots/stats")?.route.label).toBe("/api/v1/bots/stats");
    expect(earlyRouteOf("PUT", "/api/v1/bots/42/commands")?.route).toMatchObject({
      endpoint: "commands",
      label: "/api/v1/bots/:id/commands",
    });
    expect(earlyRouteOf("POST", "/api/v1/bots/42/commands")?.route).toMatchObject({
      endpoint: "commands",
      label: "/api/v1/bots/:id/commands",
      body: true,
    });
  });

  it.each([
    ["HEAD", "/api/v1/bots/42/check"],
    ["POST", "/api/v1/bots/42/check"],
    ["GET", "/api/v1/bots/42/stats"],
    ["PUT", "/api/v1/bots/commands"],
    ["PATCH", "/api/v1/bots/42/commands"],
    ["GET", "/API/v1/bots/42/check"],
    ["GET", "/api/v1/bots/42/CHECK"],
    ["GET", "/api/v1/bots/42/check/"],
    ["GET", "/api/v1/bots//check"],
    ["GET", "//api/v1/bots/42/check"],
    ["GET", "/api/v1/bots/4%32/check"],
    ["GET", "/api/v1/bots/42/webhook/deliveries"],
    ["GET", "/api/v1/bots/42"],
    ["GET", "/api/health"],
    ["GET", "/widget/42.svg"],
  ])("when %s %s is asked, then Express decides", (method, url) => {
    expect(earlyRouteOf(method, url)).toBeNull();
  });
});

describe("a request listener in front of Express", () => {
  let server: Server | undefined;
  afterEach(async () => {
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  /** The early step in front of a stand-in for Express that counts what reaches it. */
  async function listen(tokens: TokenSet | null) {
    const logger = new CapturingLogger();
    const observed: unknown[][] = [];
    const limitNotes = createLimitNotes();
    let reachedExpress = 0;
    const early = createEarlyRefusals(
      { tokens, limitNotes },
      { logger, metrics: { observe: (...args) => observed.push(args) } },
      (_req, res) => {
        reachedExpress++;
        res.end("express");
      },
    );
    const listening = createServer(early);
    server = listening;
    await new Promise<void>((resolve) => listening.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${(listening.address() as AddressInfo).port}`;
    return { base, logger, observed, limitNotes, reached: () => reachedExpress };
  }

  it("when a random token asks with a fresh set, then 401 is answered before Express with a request id, its log line and its metrics", async () => {
    const bot = await seedBot(h.t.db);
    const s = await listen(await tokenSets.fresh());
    const res = await fetch(`${s.base}/api/v1/bots/${bot.id}/check?userId=${USER}`, {
      headers: { authorization: `Bearer ${randomToken()}`, "x-request-id": "trace-1" },
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: "Invalid token." });
    expect(res.headers.get("x-request-id")).toBe("trace-1");
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(s.reached()).toBe(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(s.logger.lines.map((l) => l.obj)).toEqual([
      {
        reqId: "trace-1",
        method: "GET",
        route: "/api/v1/bots/:id/check",
        path: `/api/v1/bots/${bot.id}/check`,
        status: 401,
        ms: expect.any(Number),
      },
    ]);
    expect(s.observed).toEqual([["/api/v1/bots/:id/check", "GET", 401, expect.any(Number)]]);

    // A missing header is the same 401, also decided here.
    const bare = await fetch(`${s.base}/api/v1/bots/votes`);
    expect(bare.status).toBe(401);
    expect(bare.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    expect(s.reached()).toBe(0);
  });

  it("when the token is valid, or the set is not fresh, or there is none, then the request goes to Express", async () => {
    const bot = await seedBot(h.t.db);
    const fresh = await listen(await tokenSets.fresh());
    const known = await fetch(`${fresh.base}/api/v1/bots/${bot.id}/check?userId=${USER}`, {
      headers: { authorization: bot.token as string },
    });
    expect(await known.text()).toBe("express");

    const stale = tokenSets.started({
      connect: () => Promise.reject(new Error("no database")),
      reconnectDelayMs: 60_000,
    });
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    const notFresh = await listen(stale);
    const random = await fetch(`${notFresh.base}/api/v1/bots/${bot.id}/check`, {
      headers: { authorization: randomToken() },
    });
    expect(await random.text()).toBe("express");

    await new Promise<void>((resolve) => server?.close(() => resolve()));
    const none = await listen(null);
    expect(await (await fetch(`${none.base}/api/v1/bots/check`)).text()).toBe("express");
  });

  it("when a noted token asks again within its window, then 429 with its headers, and another bot's id 404, both before Express", async () => {
    const bot = await seedBot(h.t.db);
    const s = await listen(await tokenSets.fresh());
    const token = bot.token as string;
    s.limitNotes.note("stats", hashToken(token), { botId: bot.id, limit: 60, resetMs: 30_500 });
    const limited = await fetch(`${s.base}/api/v1/bots/${bot.id}/stats`, {
      method: "POST",
      headers: { authorization: token, "content-type": "application/json" },
      body: '{"server_count":1}',
    });
    expect(limited.status).toBe(429);
    const body = (await limited.json()) as { retryAfter: number };
    expect(body.retryAfter).toBe(31);
    expect(limited.headers.get("retry-after")).toBe("31");
    expect(limited.headers.get("ratelimit-limit")).toBe("60");
    expect(limited.headers.get("ratelimit-remaining")).toBe("0");
    const other = await fetch(`${s.base}/api/v1/bots/123456789012345678/stats`, {
      method: "POST",
      headers: { authorization: token, "content-type": "application/json" },
      body: '{"server_count":1}',
    });
    expect(other.status).toBe(404);
    expect(s.reached()).toBe(0);
    // The note is per endpoint: /check of the same token goes on.
    const check = await fetch(`${s.base}/api/v1/bots/${bot.id}/check`, { headers: { authorization: token } });
    expect(await check.text()).toBe("express");
  });
});

describe("the whole app", () => {
  it("when any spelling of a route carries a random token, then the answer is the same 401 whether the early step or Express gave it, with no query", async () => {
    const bot = await seedBot(h.t.db);
    const app = h.app({ tokens: await tokenSets.fresh() });
    const queries = watchQueries(h.t.db.pool);
    try {
      const spellings = [
        `/api/v1/bots/${bot.id}/check?userId=${USER}`,
        `/API/V1/bots/${bot.id}/check?userId=${USER}`,
        `/api/v1/bots/${bot.id}/check/?userId=${USER}`,
        `/api/v1//bots/${bot.id}/check?userId=${USER}`,
        `/api/v1/bots/check?userId=${USER}`,
      ];
      for (const path of spellings) {
        const res = await request(app).get(path).set({ Authorization: randomToken() });
        expect([path, res.status, res.body]).toEqual([path, 401, { error: "Invalid token." }]);
        expect(res.headers["x-request-id"]).toBeDefined();
      }
      expect(queries.names).toEqual([]);
    } finally {
      queries.restore();
    }
  });

  it("when a refused request is logged early, then its line is the one Express logs for the same refusal", async () => {
    const bot = await seedBot(h.t.db);
    const path = `/api/v1/bots/${bot.id}/votes`;
    const logged = async (tokens: TokenSet | undefined) => {
      const logger = new CapturingLogger();
      const app = h.app({ logger, ...(tokens ? { tokens } : {}) });
      await request(app).get(path).set({ Authorization: randomToken(), "X-Request-Id": "same" });
      await new Promise((resolve) => setImmediate(resolve));
      return logger.lines.filter((l) => l.msg === "request").map((l) => ({ ...l.obj, ms: 0 }));
    };
    const early = await logged(await tokenSets.fresh());
    const viaExpress = await logged(undefined);
    expect(early).toEqual(viaExpress);
    expect(early).toEqual([
      { reqId: "same", method: "GET", route: "/api/v1/bots/:id/votes", path, status: 401, ms: 0 },
    ]);
  });

  it("when a token over its limit is refused from its note, then the 429 is counted as a rate-limit rejection like Redis's", async () => {
    const bot = await seedBot(h.t.db);
    const metrics = createApiMetrics();
    const app = h.app({ tokens: await tokenSets.fresh(), metrics, limits: { check: 1 } });
    const check = () => checkVote(app, bot);
    expect((await check()).status).toBe(200);
    expect((await check()).status).toBe(429); // Redis decides, the note is written
    const queries = watchQueries(h.t.db.pool);
    try {
      expect((await check()).status).toBe(429); // from the note, before Express
      expect((await check()).status).toBe(429);
      expect(queries.names).toEqual([]);
    } finally {
      queries.restore();
    }
    const counted = (await metrics.registry.getSingleMetric("botdir_rate_limit_rejections_total")?.get())
      ?.values;
    expect(counted?.find((v) => v.labels.endpoint === "check")?.value).toBe(3);
  });
});
