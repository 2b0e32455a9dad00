import type { Express } from "express";
import request from "supertest";
import type { ApiApp } from "../src/app.js";
import { createHarness, type Harness } from "./support.js";

let h: Harness;
let app: ApiApp;

beforeAll(async () => {
  h = await createHarness();
  app = h.app();
});

afterAll(async () => {
  await h.close();
});

interface Layer {
  route?: { path: string | string[]; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
}

/** Every "METHOD /path" the app's routers serve (405 catch-alls excluded), in OpenAPI path syntax. */
function routesOf(express: Express): string[] {
  const out = new Set<string>();
  const walk = (stack: Layer[]) => {
    for (const layer of stack) {
      if (layer.route) {
        const paths = Array.isArray(layer.route.path) ? layer.route.path : [layer.route.path];
        for (const method of Object.keys(layer.route.methods)) {
          if (method === "_all") continue;
          for (const path of paths) out.add(`${method.toUpperCase()} ${path.replace(/:(\w+)/g, "{$1}")}`);
        }
      } else if (layer.handle?.stack) {
        walk(layer.handle.stack);
      }
    }
  };
  walk((express as unknown as { router: { stack: Layer[] } }).router.stack);
  return [...out].sort();
}

describe("GET /api/v1/openapi.json", () => {
  it("serves an OpenAPI 3.1 document without a credential", async () => {
    const res = await request(app).get("/api/v1/openapi.json");
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe("3.1.0");
    expect(res.body.info.version).toBe("1.0.0");
  });

  it("documents every route of the router, and nothing the router does not serve", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body as { paths: Record<string, object> };
    const documented = Object.entries(doc.paths)
      .flatMap(([path, ops]) => Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`))
      .sort();
    const served = routesOf(app.express);
    expect(served.length).toBeGreaterThanOrEqual(10);
    expect(documented).toEqual(served);
  });

  it("resolves every $ref to a component schema", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of refs) {
      const name = ref.replace(/^"\$ref":"#\/components\/schemas\//, "").replace(/"$/, "");
      expect(doc.components.schemas[name]).toBeDefined();
    }
  });

  it("describes the bodies from the zod schemas: command bounds, the count aliases, the check result", async () => {
    const { components } = (await request(app).get("/api/v1/openapi.json")).body;
    const command = components.schemas.CommandsBody.properties.commands;
    expect(command.maxItems).toBe(100);
    expect(command.items.properties.name).toMatchObject({ type: "string", minLength: 1, maxLength: 32 });
    expect(Object.keys(components.schemas.StatsBody.properties)).toEqual(
      expect.arrayContaining(["server_count", "guilds", "guildCount"]),
    );
    expect(components.schemas.VoteCheckResult.required).toEqual([
      "voted",
      "hasVoted",
      "votedAt",
      "nextVoteAt",
    ]);
    expect(components.securitySchemes.botToken).toMatchObject({
      type: "apiKey",
      in: "header",
      name: "Authorization",
    });
  });

  it("keeps PUT /commands canonical and documents POST as the discordbotlist.com spelling taking a bare array", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const ops = doc.paths["/api/v1/bots/{id}/commands"];
    expect(ops.put.requestBody.content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/CommandsBody",
    });
    expect(ops.post.summary).toMatch(/discordbotlist/);
    expect(ops.post.description).toMatch(/PUT/);
    const alias = doc.components.schemas.CommandsPostBody;
    expect(alias.anyOf.map((s: { type?: string }) => s.type)).toEqual(["object", "array"]);
    expect(alias.anyOf[1].maxItems).toBe(100);
  });

  it("documents the vote log's cursor paging: since, cursor, nextCursor and its 400", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    for (const path of ["/api/v1/bots/{id}/votes", "/api/v1/bots/votes"]) {
      const op = doc.paths[path].get;
      expect(op.parameters.map((p: { name: string }) => p.name)).toEqual(
        expect.arrayContaining(["since", "cursor", "limit"]),
      );
      expect(op.responses["200"].content["application/json"].schema).toEqual({
        $ref: "#/components/schemas/VotesPage",
      });
      expect(op.responses["400"]).toBeDefined();
    }
    const page = doc.components.schemas.VotesPage;
    expect(Object.keys(page.properties)).toEqual(["votes", "nextCursor"]);
    expect(page.required).toEqual(["votes"]);
  });
});
