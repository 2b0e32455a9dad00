import { Writable } from "node:stream";
import { parseMetrics, sampleValue, seedBot } from "@botdir/db/testing";
import { loggerOptions } from "@botdir/service-kit";
import { pino } from "pino";
import request from "supertest";
import { type ApiMetrics, createApiMetrics, createMetricsApp } from "../src/metrics.js";
import { checkVote, deadRedis, USER, useHarness } from "./support.js";

const { h } = useHarness();

async function scrape(metrics: ApiMetrics) {
  const res = await request(createMetricsApp(metrics.registry, h.logger)).get("/metrics");
  expect(res.status).toBe(200);
  expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.text, samples: parseMetrics(res.text) };
}

const CHECK_ROUTE = "/api/v1/bots/:id/check";

describe("API metrics (internal METRICS_PORT listener)", () => {
  it("when a token exceeds its check budget, then the 429 is counted as a check rejection and every request by its route pattern, never the raw path", async () => {
    const metrics = createApiMetrics();
    const app = h.app({ metrics, limits: { check: 2 } });
    const bot = await seedBot(h.t.db);
    const check = () => checkVote(app, bot);

    expect((await check()).status).toBe(200);
    expect((await check()).status).toBe(200);
    expect((await check()).status).toBe(429);

    const { text, samples } = await scrape(metrics);
    const labels = (status: string) => ({ app: "api", route: CHECK_ROUTE, method: "GET", status });
    expect(sampleValue(samples, "botdir_http_requests_total", labels("200"))).toBe(2);
    expect(sampleValue(samples, "botdir_http_requests_total", labels("429"))).toBe(1);
    expect(sampleValue(samples, "botdir_http_request_duration_seconds_count", labels("200"))).toBe(2);
    expect(
      sampleValue(samples, "botdir_http_request_duration_seconds_bucket", { ...labels("429"), le: "+Inf" }),
    ).toBe(1);
    expect(sampleValue(samples, "botdir_rate_limit_rejections_total", { endpoint: "check" })).toBe(1);
    expect(sampleValue(samples, "botdir_rate_limit_rejections_total", { endpoint: "stats" })).toBe(0);
    expect(sampleValue(samples, "botdir_rate_limit_fail_open_total", { endpoint: "check" })).toBe(0);
    // Two answered requests: two batched check statements of one request each; the limited third
    // is authenticated alone (one auth statement, no window query); stats none yet.
    const batch = (name: string, statement: string) => sampleValue(samples, name, { app: "api", statement });
    expect(batch("botdir_batch_statements_total", "check")).toBe(2);
    expect(batch("botdir_batch_requests_total", "check")).toBe(2);
    expect(batch("botdir_batch_statements_total", "auth")).toBe(1);
    expect(batch("botdir_batch_statements_total", "stats")).toBe(0);
    expect(text).not.toContain(bot.id);
    expect(text).not.toContain(USER);
    expect(text).not.toContain(bot.token);
  });

  it("when the limiter's Redis is down, then each request the process counts alone is a local-fallback event of its endpoint, and none fails open", async () => {
    const metrics = createApiMetrics();
    const redis = deadRedis();
    const app = h.app({ metrics, redis, limiterTimeoutMs: undefined });
    const bot = await seedBot(h.t.db);

    expect((await checkVote(app, bot)).status).toBe(200);
    expect((await checkVote(app, bot)).status).toBe(200);
    redis.disconnect();

    const { samples } = await scrape(metrics);
    const local = (endpoint: string) =>
      sampleValue(samples, "botdir_rate_limit_local_fallback_total", { endpoint });
    expect(local("check")).toBe(2);
    expect(local("votes")).toBe(0);
    expect(sampleValue(samples, "botdir_rate_limit_fail_open_total", { endpoint: "check" })).toBe(0);
    expect(sampleValue(samples, "botdir_rate_limit_rejections_total", { endpoint: "check" })).toBe(0);
  });

  it("when a path matches no route, then it is labelled unmatched, and the public port does not serve /metrics", async () => {
    const metrics = createApiMetrics();
    const app = h.app({ metrics });

    const nope = await request(app).get("/api/v1/some-raw-path-123");
    expect(nope.status).toBe(404);
    const pub = await request(app).get("/metrics");
    expect(pub.status).toBe(404);
    expect(pub.body).toEqual({ error: "No such endpoint." });

    const { text, samples } = await scrape(metrics);
    expect(sampleValue(samples, "botdir_http_requests_total", { route: "unmatched", status: "404" })).toBe(2);
    expect(text).not.toContain("some-raw-path-123");
  });

  it("when two apps are built in one process, then each counts only its own requests", async () => {
    const a = createApiMetrics();
    const b = createApiMetrics();
    await request(h.app({ metrics: a })).get("/api/health");

    const route = { route: "/api/health", method: "GET" };
    expect(sampleValue((await scrape(a)).samples, "botdir_http_requests_total", route)).toBe(1);
    expect(sampleValue((await scrape(b)).samples, "botdir_http_requests_total", route)).toBeUndefined();
  });

  it("answers anything but GET /metrics on the metrics listener with a JSON 404", async () => {
    const res = await request(createMetricsApp(createApiMetrics().registry, h.logger)).get("/api/health");
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "No such endpoint." });
  });
});

/** A pino logger with the apps' options, writing its JSON lines into memory. */
function memoryLogger() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString("utf8").split("\n").filter(Boolean));
      done();
    },
  });
  const logger = pino(loggerOptions("api", "info"), stream);
  return { logger, lines, parsed: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("request logs (pino JSON)", () => {
  it("when a request carries a token, then exactly one JSON line is written for it, with its request id and route pattern, and the token appears nowhere", async () => {
    const { logger, lines, parsed } = memoryLogger();
    const app = h.app({ logger, metrics: createApiMetrics() });
    const bot = await seedBot(h.t.db);

    const res = await request(app)
      .put(`/api/v1/bots/${bot.id}/commands`)
      .set({ Authorization: bot.token as string, "X-Request-Id": "req-abc.123" })
      .send({ commands: [{ name: "ping", description: "Pings" }] });
    expect(res.status).toBe(200);
    await new Promise((r) => setImmediate(r));

    const requestLines = parsed().filter((l) => l.msg === "request");
    expect(requestLines).toHaveLength(1);
    expect(requestLines[0]).toMatchObject({
      name: "api",
      level: 30,
      reqId: "req-abc.123",
      method: "PUT",
      route: "/api/v1/bots/:id/commands",
      status: 200,
    });
    expect(typeof requestLines[0]?.ms).toBe("number");
    expect(lines.join("\n")).not.toContain(bot.token);
    expect(lines.join("\n")).not.toContain("Pings");
  });

  it("when something logs an Authorization header, a token, a secret or a body by mistake, then pino writes [redacted] instead", () => {
    const { logger, lines } = memoryLogger();
    logger.info(
      {
        authorization: "Bearer tok-1",
        req: { headers: { authorization: "tok-2", cookie: "sid=tok-3" }, body: { token: "tok-4" } },
        token: "tok-5",
        bot: { token: "tok-6", webhookSecret: "tok-7" },
        secret: "tok-8",
        body: "tok-9",
      },
      "oops",
    );
    const out = lines.join("\n");
    for (let i = 1; i <= 9; i++) expect(out).not.toContain(`tok-${i}`);
    expect(out).toContain("[redacted]");
  });
});
