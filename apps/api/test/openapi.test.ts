import {
  CommandsBody,
  CommandsPostBody,
  CommandsResponse,
  DeliveryAttemptsResponse,
  ErrorBody,
  HealthBody,
  RecoverBody,
  RecoverResponse,
  RecoveryResponse,
  RedeliverResponse,
  StatsBody,
  StatsResponse,
  VoteAvailablePayload,
  VoteCheckResult,
  VotesPage,
  WebhookPayload,
} from "@botdir/schema";
import type { Express } from "express";
import request from "supertest";
import type { ZodType } from "zod";
import { useHarness } from "./support.js";

const { h, app } = useHarness();

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
    const served = routesOf(h.app().express);
    expect(served.length).toBeGreaterThanOrEqual(10);
    expect(documented).toEqual(served);
  });

  it("documents the X-Botdir-Conflict header on every 409", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const conflicts = Object.entries(
      doc.paths as Record<
        string,
        Record<string, { responses?: Record<string, { headers?: Record<string, unknown> }> }>
      >,
    )
      .flatMap(([path, item]) =>
        Object.entries(item).map(([method, op]) => [`${method} ${path}`, op.responses?.["409"]] as const),
      )
      .filter(([, response]) => response !== undefined);
    expect(conflicts.length).toBeGreaterThan(0);
    for (const [where, response] of conflicts) {
      expect([where, Object.keys(response?.headers ?? {})]).toEqual([
        where,
        expect.arrayContaining(["X-Botdir-Conflict"]),
      ]);
    }
  });

  it("documents the flood budget's 503 with Retry-After on the routes that shed (the early-refused token routes and the badge)", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body as {
      paths: Record<
        string,
        Record<string, { responses: Record<string, { headers?: object; content?: Record<string, unknown> }> }>
      >;
    };
    const shedding = [
      "get /api/v1/bots/{id}/check",
      "get /api/v1/bots/check",
      "get /api/v1/bots/{id}/votes",
      "get /api/v1/bots/votes",
      "post /api/v1/bots/{id}/stats",
      "post /api/v1/bots/stats",
      "put /api/v1/bots/{id}/commands",
      "post /api/v1/bots/{id}/commands",
      "get /widget/{id}.svg",
    ];
    for (const where of shedding) {
      const [method, path] = where.split(" ") as [string, string];
      const shed = doc.paths[path]?.[method]?.responses["503"];
      expect([where, Object.keys(shed?.headers ?? {}), Object.keys(shed?.content ?? {})]).toEqual([
        where,
        expect.arrayContaining(["Retry-After"]),
        expect.arrayContaining(["application/json"]),
      ]);
    }
    // The badge's other 503: the "unavailable" badge itself.
    expect(Object.keys(doc.paths["/widget/{id}.svg"]?.get?.responses["503"]?.content ?? {})).toContain(
      "image/svg+xml",
    );
    // Routes that never shed document no 503.
    expect(doc.paths["/api/v1/bots/{id}/webhook/deliveries"]?.get?.responses["503"]).toBeUndefined();
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

  it("gives every JSON request and response an example, each one valid against its zod schema", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const schemas: Record<string, ZodType> = {
      CommandsBody,
      CommandsPostBody,
      CommandsResponse,
      StatsBody,
      StatsResponse,
      VoteCheckResult,
      VotesPage,
      DeliveryAttemptsResponse,
      RedeliverResponse,
      RecoverBody,
      RecoverResponse,
      RecoveryResponse,
      Error: ErrorBody.strict(),
      Health: HealthBody,
      WebhookPayload,
      VoteAvailablePayload,
    };
    const media: { where: string; media: { schema: { $ref?: string }; example?: unknown } }[] = [];
    const operations = [
      ...Object.entries(doc.paths).flatMap(([path, ops]) =>
        Object.entries(ops as object).map(([m, op]) => [`${m} ${path}`, op]),
      ),
      ...Object.entries(doc.webhooks).flatMap(([name, ops]) =>
        Object.entries(ops as object).map(([m, op]) => [`${m} ${name}`, op]),
      ),
    ] as [string, { requestBody?: { content: object }; responses: Record<string, { content?: object }> }][];
    for (const [where, op] of operations) {
      const json = (content?: object) => (content as Record<string, never> | undefined)?.["application/json"];
      const body = json(op.requestBody?.content);
      // Every JSON body of a component schema (the document itself, at openapi.json, has none).
      if (body) media.push({ where: `${where} request`, media: body });
      for (const [status, response] of Object.entries(op.responses)) {
        const content = json(response.content);
        if (content && where !== "get /api/v1/openapi.json")
          media.push({ where: `${where} ${status}`, media: content });
      }
    }
    expect(media.length).toBeGreaterThan(60);
    const problems = media.flatMap(({ where, media: m }) => {
      const name = m.schema.$ref?.replace("#/components/schemas/", "") ?? "";
      const schema = schemas[name];
      if (m.example === undefined) return [`${where}: no example`];
      if (schema === undefined) return [`${where}: ${name} has no zod schema in this test`];
      return schema.safeParse(m.example).success ? [] : [`${where}: the example is not a valid ${name}`];
    });
    expect(problems).toEqual([]);
  });

  it("describes the vote.create webhook as an OpenAPI 3.1 webhook with its headers and a 410 that disables it", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const hook = doc.webhooks["vote.create"].post;
    expect(hook.requestBody.content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/WebhookPayload",
    });
    expect(hook.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining([
        "Authorization",
        "X-Webhook-Event",
        "X-Webhook-Delivery",
        "X-Webhook-Signature-256",
        "webhook-signature",
      ]),
    );
    expect(Object.keys(hook.responses).sort()).toEqual(["2XX", "410", "default"]);
  });

  it("describes the vote.available webhook with its own payload carrying available_at and the same headers", async () => {
    const doc = (await request(app).get("/api/v1/openapi.json")).body;
    const hook = doc.webhooks["vote.available"].post;
    expect(hook.requestBody.content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/VoteAvailablePayload",
    });
    expect(doc.components.schemas.VoteAvailablePayload.required).toEqual([
      "event",
      "bot_id",
      "user_id",
      "voted_at",
      "available_at",
    ]);
    const event = hook.parameters.find((p: { name: string }) => p.name === "X-Webhook-Event");
    expect(event.example).toBe("vote.available");
    expect(hook.parameters.map((p: { name: string }) => p.name)).toEqual(
      doc.webhooks["vote.create"].post.parameters.map((p: { name: string }) => p.name),
    );
  });
});
