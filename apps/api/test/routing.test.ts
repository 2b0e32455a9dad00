import { seedBot } from "@botdir/db/testing";
import request from "supertest";
import { USER, useHarness } from "./support.js";

const { h, app } = useHarness();

describe("routing", () => {
  it.each([
    ["GET", "/nope"],
    ["GET", "/api/v1/bots"],
    ["POST", "/api/v1/bots/123456789012345678/guilds"],
    ["GET", "/widget/123456789012345678"],
  ])("when %s %s is not an endpoint, then a JSON 404", async (method, path) => {
    const res = await request(app)[method.toLowerCase() as "get" | "post"](path);
    expect(res.status).toBe(404);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.body).toEqual({ error: "No such endpoint." });
  });

  /** Each endpoint and the methods it answers (its Allow header); every other method gets a 405. */
  const ALLOWED: [path: string, allow: string][] = [
    ["/api/v1/bots/123456789012345678/commands", "PUT, POST"],
    ["/api/v1/bots/123456789012345678/stats", "POST"],
    ["/api/v1/bots/stats", "POST"],
    ["/api/v1/bots/123456789012345678/check", "GET, HEAD"],
    ["/api/v1/bots/check", "GET, HEAD"],
    ["/api/v1/bots/123456789012345678/votes", "GET, HEAD"],
    ["/api/v1/bots/votes", "GET, HEAD"],
    ["/widget/123456789012345678.svg", "GET, HEAD"],
    ["/api/health", "GET, HEAD"],
    ["/api/v1/openapi.json", "GET, HEAD"],
  ];
  const WRONG_METHODS = ALLOWED.flatMap(([path, allow]) =>
    (["get", "post", "put", "patch", "delete"] as const)
      .filter((method) => !allow.split(", ").includes(method.toUpperCase()))
      .map((method) => [method, path, allow] as const),
  );

  it.each(WRONG_METHODS)(
    "when %s %s uses the wrong method, then a JSON 405 with Allow: %s",
    async (method, path, allow) => {
      const res = await request(app)[method](path);
      expect(res.status).toBe(405);
      expect(res.headers.allow).toBe(allow);
      expect(res.body).toEqual({ error: "Method not allowed on this endpoint." });
    },
  );

  it("when the path has a trailing slash or doubled slashes, then it still reaches the endpoint", async () => {
    const bot = await seedBot(h.t.db);
    const auth = { Authorization: bot.token! };
    const trailing = await request(app)
      .post(`/api/v1/bots/${bot.id}/stats/`)
      .set(auth)
      .send({ server_count: 1 });
    expect(trailing.status).toBe(200);
    const doubled = await request(app).post("/api/v1//bots/stats").set(auth).send({ server_count: 2 });
    expect(doubled.status).toBe(200);
    const check = await request(app).get(`/api/v1//bots//${bot.id}/check?userId=${USER}`).set(auth);
    expect(check.status).toBe(200);
  });

  it("when a URL is malformed, then a JSON 400, not a 500", async () => {
    const res = await request(app).get("/api/v1/bots/%E0%A4%A/votes").set("Authorization", "x");
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: expect.any(String) });
  });
});
