import { randomBytes, randomUUID } from "node:crypto";
import { createDb, createSecretBox, type Db } from "@botdir/db";
import { randomBotId, randomUserId, seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Express } from "express";
import request from "supertest";
import { seedDeliveries } from "./support/attempts.js";
import { useIngestApp } from "./support/votes.js";

const KEY = `internal-${randomBytes(16).toString("hex")}`;
const clock = new ManualClock(new Date("2026-11-21T05:00:00.000Z"));

let deadDb: Db;
let app: Express;
/** The same app over a PostgreSQL that refuses connections: every query fails. */
let broken: Express;
/** The same app without SECRET_ENCRYPTION_KEY. */
let keyless: Express;
let doc: OpenApiDoc;
let ajv: Ajv2020;

interface OpenApiResponse {
  description: string;
  headers?: Record<string, { required?: boolean; schema: { const?: string; enum?: string[] } }>;
  content?: Record<string, { schema: object }>;
}
interface OpenApiOperation {
  security: Array<Record<string, string[]>>;
  responses: Record<string, OpenApiResponse>;
}
interface OpenApiDoc {
  openapi: string;
  paths: Record<string, Record<string, OpenApiOperation>>;
  components: { schemas: Record<string, object>; securitySchemes: Record<string, object> };
}

const box = createSecretBox(randomBytes(32));
const t = useIngestApp({ clock, internalApiKey: KEY, secretBox: box });

beforeAll(async () => {
  deadDb = createDb({ url: "postgresql://postgres@127.0.0.1:1/none", connectionTimeoutMs: 200 });
  app = t.app();
  broken = t.app({ db: deadDb });
  keyless = t.app({ secretBox: null });
  doc = (await request(app).get("/internal/v1/openapi.json").set("Authorization", KEY)).body;
  // The document's own schemas, with their #/components refs resolved against the document.
  ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema({ $id: "openapi.json", components: doc.components });
});

afterAll(async () => {
  await deadDb.close();
});

interface Layer {
  route?: { path: string | string[]; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
  rawPath?: string | string[];
  slash?: boolean;
}

/**
 * Every "METHOD /path" the app serves (405 catch-alls excluded), in OpenAPI path syntax, with the
 * mount path of nested routers (e.g. the listing router at /internal/v1/bots) prefixed.
 */
function routesOf(express: Express): string[] {
  const out = new Set<string>();
  const join = (prefix: string, path: string) => (prefix && path === "/" ? prefix : `${prefix}${path}`);
  const walk = (stack: Layer[], prefix: string) => {
    for (const layer of stack) {
      if (layer.route) {
        const paths = Array.isArray(layer.route.path) ? layer.route.path : [layer.route.path];
        for (const method of Object.keys(layer.route.methods)) {
          if (method === "_all") continue;
          for (const path of paths) {
            out.add(`${method.toUpperCase()} ${join(prefix, path).replace(/:(\w+)/g, "{$1}")}`);
          }
        }
      } else if (layer.handle?.stack) {
        if (Array.isArray(layer.rawPath)) throw new Error("a router mounted on several paths");
        const mount = layer.slash || layer.rawPath === undefined ? "" : layer.rawPath;
        walk(layer.handle.stack, `${prefix}${mount}`);
      }
    }
  };
  walk((express as unknown as { router: { stack: Layer[] } }).router.stack, "");
  return [...out].sort();
}

const operationKeys = () =>
  Object.entries(doc.paths)
    .flatMap(([path, ops]) => Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`))
    .sort();

/** Statuses seen per operation ("POST /internal/v1/votes" -> {201, 409, ...}). */
const observed = new Map<string, Set<string>>();

/**
 * The response is documented for that operation and status, and its body validates against the
 * documented schema of its media type; documented constant headers have their value, and a
 * documented header with listed values (X-Botdir-Conflict) is sent with one of them.
 */
function expectDocumented(operation: string, res: request.Response): void {
  const [method, path] = operation.split(" ") as [string, string];
  const op = doc.paths[path]?.[method.toLowerCase()];
  if (!op) throw new Error(`${operation} is not documented`);
  const status = String(res.status);
  const documented = op.responses[status];
  if (!documented) throw new Error(`${operation} answered ${status}, which is not documented: ${res.text}`);
  if (!observed.has(operation)) observed.set(operation, new Set());
  observed.get(operation)?.add(status);

  const contentType = res.headers["content-type"] ?? "";
  const mediaTypes = Object.keys(documented.content ?? {});
  const mediaType = mediaTypes.find((type) => contentType.startsWith(type));
  if (!mediaType)
    throw new Error(`${operation} ${status}: ${contentType} is not one of ${mediaTypes.join(", ")}`);
  const schema = documented.content?.[mediaType]?.schema ?? {};
  const resolved = JSON.parse(
    JSON.stringify(schema).replaceAll('"#/components/', '"openapi.json#/components/'),
  );
  const body = mediaType === "application/json" ? res.body : res.text;
  const valid = ajv.validate(resolved, body);
  if (!valid) {
    throw new Error(`${operation} ${status}: ${ajv.errorsText(ajv.errors)} in ${JSON.stringify(body)}`);
  }
  for (const [name, header] of Object.entries(documented.headers ?? {})) {
    if (header.schema.const !== undefined) expect(res.headers[name.toLowerCase()]).toBe(header.schema.const);
    if (header.schema.enum !== undefined) {
      expect([operation, status, name, header.schema.enum]).toEqual([
        operation,
        status,
        name,
        expect.arrayContaining([res.headers[name.toLowerCase()]]),
      ]);
    }
  }
}

describe("GET /internal/v1/openapi.json", () => {
  it("when the internal key is presented, then 200 with an OpenAPI 3.1 document", async () => {
    const res = await request(app).get("/internal/v1/openapi.json").set("Authorization", `Bearer ${KEY}`);
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe("3.1.0");
    expectDocumented("GET /internal/v1/openapi.json", res);
  });

  it("when the key is missing or wrong, then 401 with the error body", async () => {
    for (const auth of [undefined, "wrong"]) {
      const req = request(app).get("/internal/v1/openapi.json");
      const res = await (auth ? req.set("Authorization", auth) : req);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "Invalid internal API key." });
      expectDocumented("GET /internal/v1/openapi.json", res);
    }
  });

  it("when another method is used, then 405 allowing GET", async () => {
    const res = await request(app).post("/internal/v1/openapi.json").set("Authorization", KEY);
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe("GET");
  });

  it("documents every route of the app, and nothing the app does not serve", () => {
    const served = routesOf(app);
    expect(served).toEqual(
      expect.arrayContaining(["POST /internal/v1/votes", "GET /internal/v1/bots/{id}", "GET /metrics"]),
    );
    expect(served.length).toBe(18);
    expect(operationKeys()).toEqual(served);
  });

  it("documents the X-Botdir-Conflict header, required, with its causes, on every 409", () => {
    const conflicts = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([, op]) => op.responses["409"] !== undefined)
        .map(
          ([method, op]) =>
            [`${method} ${path}`, op.responses["409"]?.headers?.["X-Botdir-Conflict"]] as const,
        ),
    );
    expect(conflicts.length).toBeGreaterThanOrEqual(8);
    for (const [where, header] of conflicts) {
      expect([where, header?.required, header?.schema.enum?.length]).toEqual([
        where,
        true,
        expect.any(Number),
      ]);
    }
    const causes = Object.fromEntries(conflicts.map(([where, header]) => [where, header?.schema.enum]));
    expect(causes["post /internal/v1/bots/{id}/webhook/recover"]).toEqual([
      "webhook_disabled",
      "no_webhook",
      "recovery_running",
    ]);
    expect(causes["post /internal/v1/bots/{id}/webhook/enable"]).toEqual([
      "no_webhook",
      "recovery_running",
      "webhook_disabled",
    ]);
  });

  it("resolves every $ref to a component schema", () => {
    const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of refs) {
      const name = ref.replace(/^"\$ref":"#\/components\/schemas\//, "").replace(/"$/, "");
      expect(doc.components.schemas[name]).toBeDefined();
    }
  });

  it("declares the internal key as the security scheme of every keyed operation, and none for health and metrics", () => {
    expect(doc.components.securitySchemes.internalKey).toMatchObject({
      type: "apiKey",
      in: "header",
      name: "Authorization",
    });
    for (const operation of operationKeys()) {
      const [method, path] = operation.split(" ") as [string, string];
      const op = doc.paths[path]?.[method.toLowerCase()];
      const open = path === "/health" || path === "/metrics";
      expect([operation, op?.security]).toEqual([operation, open ? [] : [{ internalKey: [] }]]);
      if (!open)
        expect(Object.keys(op?.responses ?? {}).map((status) => `${operation} ${status}`)).toContain(
          `${operation} 401`,
        );
    }
  });

  it("describes the bodies from the zod schemas: strict create body, the id pattern, the listing fields", () => {
    const s = doc.components.schemas as Record<string, Record<string, unknown>>;
    expect(s.CreateBotBody).toMatchObject({ additionalProperties: false, required: ["id"] });
    expect(s.SetWebhookBody).toMatchObject({ additionalProperties: false, required: ["url"] });
    expect(s.CastVoteBody?.properties).toMatchObject({ bot_id: { pattern: "^\\d{17,19}$" } });
    expect(s.Listing?.required).toEqual([
      "id",
      "status",
      "approved",
      "approved_at",
      "commands",
      "server_count",
      "checked_in_at",
      "webhook_url",
      "webhook_state",
      "webhook_disabled_reason",
      "webhook_disabled_at",
      "webhook_events",
      "has_token",
      "token_created_at",
      "created_at",
    ]);
    expect(JSON.stringify(s.Listing)).not.toMatch(/secret|token_hash|"token"/);
    expect(s.DeliveryAttemptsResponse).toMatchObject({ properties: { attempts: { maxItems: 10 } } });
  });
});

type Method = "get" | "post" | "put" | "delete";

interface KeyedOperation {
  method: Method;
  /** OpenAPI path template. */
  path: string;
  /** A valid body, when the operation takes one. */
  body?: () => object;
  /** The body limit of its parser. */
  limitKb: number;
}

const KEYED: KeyedOperation[] = [
  {
    method: "post",
    path: "/internal/v1/votes",
    body: () => ({ bot_id: randomBotId(), user_id: randomUserId() }),
    limitKb: 4,
  },
  { method: "post", path: "/internal/v1/bots", body: () => ({ id: randomBotId() }), limitKb: 16 },
  { method: "get", path: "/internal/v1/bots/{id}", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/approve", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/token", limitKb: 16 },
  {
    method: "put",
    path: "/internal/v1/bots/{id}/webhook",
    body: () => ({ url: "https://hooks.example.com/vote" }),
    limitKb: 16,
  },
  { method: "delete", path: "/internal/v1/bots/{id}/webhook", limitKb: 16 },
  {
    method: "put",
    path: "/internal/v1/bots/{id}/webhook/events",
    body: () => ({ events: ["vote.create", "vote.available"] }),
    limitKb: 16,
  },
  { method: "get", path: "/internal/v1/bots/{id}/webhook/deliveries", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/webhook/secret", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/webhook/test", limitKb: 16 },
  { method: "post", path: "/internal/v1/bots/{id}/webhook/enable", limitKb: 16 },
  {
    method: "post",
    path: "/internal/v1/bots/{id}/webhook/recover",
    body: () => ({ since: "2026-11-20T00:00:00Z" }),
    limitKb: 16,
  },
  { method: "get", path: "/internal/v1/bots/{id}/webhook/recoveries/{recoveryId}", limitKb: 16 },
];

const opName = (op: KeyedOperation) => `${op.method.toUpperCase()} ${op.path}`;

function send(
  target: Express,
  op: KeyedOperation,
  options: { id?: string; key?: string | null; body?: object | undefined },
) {
  const url = op.path
    .replace("{id}", options.id ?? randomBotId())
    .replace("{recoveryId}", "0f8d1c2e-4b5a-4c3d-9e8f-7a6b5c4d3e2f");
  let req = request(target)[op.method](url);
  if (options.key !== null) req = req.set("Authorization", options.key ?? KEY);
  return options.body === undefined ? req : req.send(options.body);
}

describe("each documented response schema validates a real response", () => {
  it("POST /internal/v1/votes: 201 recorded, then 409 with nextVoteAt on a repeat", async () => {
    const bot = await seedBot(t.db);
    const body = { bot_id: bot.id, user_id: randomUserId() };
    const op = "POST /internal/v1/votes";
    const first = await request(app).post("/internal/v1/votes").set("Authorization", KEY).send(body);
    expect(first.status).toBe(201);
    expectDocumented(op, first);
    const again = await request(app).post("/internal/v1/votes").set("Authorization", KEY).send(body);
    expect(again.status).toBe(409);
    expect(again.body.nextVoteAt).toBe(first.body.nextVoteAt);
    expectDocumented(op, again);
    const bad = await request(app)
      .post("/internal/v1/votes")
      .set("Authorization", KEY)
      .send({ bot_id: bot.id, user_id: "12" });
    expect(bad.status).toBe(400);
    expectDocumented(op, bad);
  });

  it("POST /internal/v1/bots: 201 pending, 409 for an existing id, 400 for an unknown field", async () => {
    const op = "POST /internal/v1/bots";
    const id = randomBotId();
    const created = await request(app).post("/internal/v1/bots").set("Authorization", KEY).send({ id });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ id, status: "pending" });
    expectDocumented(op, created);
    const dup = await request(app)
      .post("/internal/v1/bots")
      .set("Authorization", KEY)
      .send({ id, approve: true });
    expect(dup.status).toBe(409);
    expectDocumented(op, dup);
    const typo = await request(app)
      .post("/internal/v1/bots")
      .set("Authorization", KEY)
      .send({ id: randomBotId(), aprove: true });
    expect(typo.status).toBe(400);
    expectDocumented(op, typo);
  });

  it("POST /internal/v1/bots/{id}/approve: 200 approved", async () => {
    const bot = await seedBot(t.db, { status: "pending" });
    const res = await request(app).post(`/internal/v1/bots/${bot.id}/approve`).set("Authorization", KEY);
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("approved");
    expectDocumented("POST /internal/v1/bots/{id}/approve", res);
  });

  it("POST /internal/v1/bots/{id}/token: 200 with the token once, 409 for a pending bot", async () => {
    const op = "POST /internal/v1/bots/{id}/token";
    const approved = await seedBot(t.db);
    const res = await request(app).post(`/internal/v1/bots/${approved.id}/token`).set("Authorization", KEY);
    expect(res.status).toBe(200);
    expectDocumented(op, res);
    const pending = await seedBot(t.db, { status: "pending" });
    const refused = await request(app)
      .post(`/internal/v1/bots/${pending.id}/token`)
      .set("Authorization", KEY);
    expect(refused.status).toBe(409);
    expectDocumented(op, refused);
  });

  it("PUT and DELETE /internal/v1/bots/{id}/webhook: 200 set with a secret, 400 refused URL, 503 without an encryption key, 200 cleared", async () => {
    const put = "PUT /internal/v1/bots/{id}/webhook";
    const bot = await seedBot(t.db);
    const url = `/internal/v1/bots/${bot.id}/webhook`;
    const setWebhook = (on: typeof app, webhookUrl: string) =>
      request(on).put(url).set("Authorization", KEY).send({ url: webhookUrl });
    const set = await setWebhook(app, "https://hooks.example.com/v");
    expect(set.status).toBe(200);
    expectDocumented(put, set);
    const refused = await setWebhook(app, "http://hooks.example.com/v");
    expect(refused.status).toBe(400);
    expectDocumented(put, refused);
    const unavailable = await setWebhook(keyless, "https://hooks.example.com/v");
    expect(unavailable.status).toBe(503);
    expectDocumented(put, unavailable);
    const cleared = await request(app).delete(url).set("Authorization", KEY);
    expect(cleared.status).toBe(200);
    expect(cleared.body.url).toBeNull();
    expectDocumented("DELETE /internal/v1/bots/{id}/webhook", cleared);
  });

  it("GET /internal/v1/bots/{id}/webhook/deliveries: 200 with attempts of every outcome", async () => {
    const bot = await seedBot(t.db);
    await seedDeliveries(t.db, bot.id, new Date("2026-11-20T00:00:00.000Z"), [
      {
        state: "delivered",
        attempts: [
          { statusCode: null, errorKind: "timeout", at: 0 },
          { statusCode: 204, errorKind: null, at: 1 },
        ],
      },
      { state: "failed", attempts: [{ statusCode: 500, errorKind: "http_status", at: 2 }] },
      { state: "pending", attempts: [{ statusCode: null, errorKind: "connection", at: 3 }] },
    ]);
    const res = await request(app)
      .get(`/internal/v1/bots/${bot.id}/webhook/deliveries`)
      .set("Authorization", KEY);
    expect(res.status).toBe(200);
    expect(res.body.attempts.map((a: { outcome: string }) => a.outcome)).toEqual([
      "failed",
      "failed",
      "delivered",
      "failed",
    ]);
    expect(res.body.attempts.map((a: { deliveryState: string }) => a.deliveryState)).toEqual([
      "pending",
      "failed",
      "delivered",
      "delivered",
    ]);
    expectDocumented("GET /internal/v1/bots/{id}/webhook/deliveries", res);
  });

  it("POST …/deliveries/{deliveryId}/redeliver: 202 for a failed delivery, then 409 while it is pending", async () => {
    const op = "POST /internal/v1/bots/{id}/webhook/deliveries/{deliveryId}/redeliver";
    const bot = await seedBot(t.db);
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookUrl: "https://hooks.example.com/v", webhookSecretEncrypted: "x" },
    });
    const [attempt] = await seedDeliveries(t.db, bot.id, new Date("2026-11-20T00:00:00.000Z"), [
      { state: "failed", attempts: [{ statusCode: 500, errorKind: "http_status", at: 0 }] },
    ]);
    const url = `/internal/v1/bots/${bot.id}/webhook/deliveries/${attempt?.deliveryId}/redeliver`;
    const first = await request(app).post(url).set("Authorization", KEY);
    expect(first.status).toBe(202);
    expect(first.body).toEqual({ deliveryId: attempt?.deliveryId, state: "pending", series: 1 });
    expectDocumented(op, first);
    const again = await request(app).post(url).set("Authorization", KEY);
    expect(again.status).toBe(409);
    expectDocumented(op, again);
  });

  it("POST …/webhook/recover: 202, 409 overlapping, 409 disabled, 400 bad since; GET …/recoveries/{id}: 200, 404", async () => {
    const op = "POST /internal/v1/bots/{id}/webhook/recover";
    const get = "GET /internal/v1/bots/{id}/webhook/recoveries/{recoveryId}";
    const bot = await seedBot(t.db);
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookUrl: "https://hooks.example.com/v", webhookSecretEncrypted: "x" },
    });
    await seedDeliveries(t.db, bot.id, new Date("2026-11-20T12:00:00.000Z"), [
      { state: "failed", attempts: [{ statusCode: 500, errorKind: "http_status", at: 0 }] },
    ]);
    const url = `/internal/v1/bots/${bot.id}/webhook/recover`;
    const started = await request(app)
      .post(url)
      .set("Authorization", KEY)
      .send({ since: "2026-11-20T00:00:00Z" });
    expect(started.status).toBe(202);
    expect(started.body.queued).toBe(1);
    expectDocumented(op, started);
    const overlapping = await request(app)
      .post(url)
      .set("Authorization", KEY)
      .send({ since: "2026-11-20T06:00:00Z" });
    expect(overlapping.status).toBe(409);
    expect(overlapping.headers["x-botdir-conflict"]).toBe("recovery_running");
    expectDocumented(op, overlapping);
    await t.db.prisma.bot.update({ where: { id: bot.id }, data: { webhookDisabledAt: clock.now() } });
    const disabled = await request(app)
      .post(url)
      .set("Authorization", KEY)
      .send({ since: "2026-11-20T00:00:00Z" });
    expect([disabled.status, disabled.headers["x-botdir-conflict"]]).toEqual([409, "webhook_disabled"]);
    expectDocumented(op, disabled);
    // Enabling with a recoverSince over the running recovery's window: enabled, the recovery refused.
    const enable = "POST /internal/v1/bots/{id}/webhook/enable";
    const refusedWindow = await request(app)
      .post(`/internal/v1/bots/${bot.id}/webhook/enable`)
      .set("Authorization", KEY)
      .send({ recoverSince: "2026-01-01T00:00:00Z" });
    expect(refusedWindow.status).toBe(400);
    expectDocumented(enable, refusedWindow);
    expect(
      (await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } })).webhookDisabledAt,
    ).not.toBeNull();
    const enabledOverlapping = await request(app)
      .post(`/internal/v1/bots/${bot.id}/webhook/enable`)
      .set("Authorization", KEY)
      .send({ recoverSince: "2026-11-20T06:00:00Z" });
    expect([enabledOverlapping.status, enabledOverlapping.headers["x-botdir-conflict"]]).toEqual([
      409,
      "recovery_running",
    ]);
    expectDocumented(enable, enabledOverlapping);
    expect((await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } })).webhookDisabledAt).toBeNull();
    const bad = await request(app)
      .post(url)
      .set("Authorization", KEY)
      .send({ since: "2026-01-01T00:00:00Z" });
    expect(bad.status).toBe(400);
    expectDocumented(op, bad);

    const shown = await request(app)
      .get(`/internal/v1/bots/${bot.id}/webhook/recoveries/${started.body.recoveryId}`)
      .set("Authorization", KEY);
    expect(shown.status).toBe(200);
    expectDocumented(get, shown);
    const unknown = await request(app)
      .get(`/internal/v1/bots/${bot.id}/webhook/recoveries/${randomUUID()}`)
      .set("Authorization", KEY);
    expect(unknown.status).toBe(404);
    expectDocumented(get, unknown);
  });

  it("GET /internal/v1/bots/{id}: 200 for a bare listing and for a full one", async () => {
    const op = "GET /internal/v1/bots/{id}";
    const bare = await seedBot(t.db, { status: "pending" });
    const res = await request(app).get(`/internal/v1/bots/${bare.id}`).set("Authorization", KEY);
    expect(res.status).toBe(200);
    expect(res.body.commands).toEqual([]);
    expectDocumented(op, res);

    const full = await seedBot(t.db, { serverCount: 1482 });
    await t.db.prisma.bot.update({
      where: { id: full.id },
      data: {
        commands: [
          { name: "ping", description: "Replies with pong.", type: 1, options: [] },
          { name: "Report", type: 3 },
        ],
        checkedInAt: new Date("2026-11-21T04:59:00.123Z"),
        webhookUrl: "https://hooks.example.com/v",
      },
    });
    const rich = await request(app).get(`/internal/v1/bots/${full.id}`).set("Authorization", KEY);
    expect(rich.status).toBe(200);
    expect(rich.body).toMatchObject({
      server_count: 1482,
      has_token: true,
      webhook_url: "https://hooks.example.com/v",
    });
    expectDocumented(op, rich);
  });

  it("POST …/webhook/secret, …/test, …/enable: 200, 409 without a webhook, 503 without an encryption key, 429 beyond the test limit", async () => {
    const withHook = async () => {
      const bot = await seedBot(t.db);
      // A loopback literal: the test event is refused before connecting (refused_target), still a 200.
      await t.db.prisma.bot.update({
        where: { id: bot.id },
        data: { webhookUrl: "https://127.0.0.1:9/hook", webhookSecretEncrypted: box.encrypt("whsec_00") },
      });
      return bot.id;
    };
    const bare = (await seedBot(t.db)).id;
    for (const action of ["secret", "test", "enable"]) {
      const op = `POST /internal/v1/bots/{id}/webhook/${action}`;
      const id = await withHook();
      const done = await request(app)
        .post(`/internal/v1/bots/${id}/webhook/${action}`)
        .set("Authorization", KEY);
      expect(done.status).toBe(200);
      expectDocumented(op, done);
      const none = await request(app)
        .post(`/internal/v1/bots/${bare}/webhook/${action}`)
        .set("Authorization", KEY);
      expect(none.status).toBe(409);
      expectDocumented(op, none);
      if (action !== "enable") {
        const unavailable = await request(keyless)
          .post(`/internal/v1/bots/${await withHook()}/webhook/${action}`)
          .set("Authorization", KEY);
        expect(unavailable.status).toBe(503);
        expectDocumented(op, unavailable);
      }
    }
    const id = await withHook();
    let last: request.Response | undefined;
    for (let i = 0; i < 6; i++) {
      last = await request(app).post(`/internal/v1/bots/${id}/webhook/test`).set("Authorization", KEY);
    }
    expect(last?.status).toBe(429);
    expectDocumented("POST /internal/v1/bots/{id}/webhook/test", last as request.Response);
  });

  it("PUT …/webhook/events: 200 with the stored events, 400 for an unknown or no event; POST …/test with an event: 200, 400 for an unknown one", async () => {
    const op = "PUT /internal/v1/bots/{id}/webhook/events";
    const bot = await seedBot(t.db);
    const url = `/internal/v1/bots/${bot.id}/webhook/events`;
    const set = await request(app)
      .put(url)
      .set("Authorization", KEY)
      .send({ events: ["vote.available", "vote.create"] });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ id: bot.id, events: ["vote.create", "vote.available"] });
    expectDocumented(op, set);
    const unknown = await request(app)
      .put(url)
      .set("Authorization", KEY)
      .send({ events: ["vote.delete"] });
    expect(unknown.status).toBe(400);
    expectDocumented(op, unknown);

    const testOp = "POST /internal/v1/bots/{id}/webhook/test";
    await t.db.prisma.bot.update({
      where: { id: bot.id },
      data: { webhookUrl: "https://127.0.0.1:9/hook", webhookSecretEncrypted: box.encrypt("whsec_00") },
    });
    const sample = await request(app)
      .post(`/internal/v1/bots/${bot.id}/webhook/test`)
      .set("Authorization", KEY)
      .send({ event: "vote.available" });
    expect(sample.status).toBe(200);
    expectDocumented(testOp, sample);
    const badEvent = await request(app)
      .post(`/internal/v1/bots/${bot.id}/webhook/test`)
      .set("Authorization", KEY)
      .send({ event: "vote.delete" });
    expect(badEvent.status).toBe(400);
    expect(badEvent.body).toEqual({ error: "event must be webhook.test, vote.create, vote.available." });
    expectDocumented(testOp, badEvent);
  });

  it("GET /health: 200 when the stores answer, 503 when PostgreSQL does not; no key needed", async () => {
    const up = await request(app).get("/health");
    expect(up.status).toBe(200);
    expectDocumented("GET /health", up);
    const down = await request(broken).get("/health");
    expect(down.status).toBe(503);
    expectDocumented("GET /health", down);
  });

  it("GET /metrics: 200 Prometheus text; no key needed", async () => {
    const res = await request(app).get("/metrics");
    expect(res.status).toBe(200);
    expect(res.text).toContain("# TYPE");
    expectDocumented("GET /metrics", res);
  });

  it.each(KEYED.map((op) => [opName(op), op] as const))(
    "%s: the shared failures (401, 400 bad id, 404, 413, 500) are documented with the error body",
    async (_name, op) => {
      const name = opName(op);
      const noKey = await send(app, op, { key: null, body: op.body?.() });
      expect(noKey.status).toBe(401);
      expectDocumented(name, noKey);

      const tooLarge = await send(app, op, {
        id: (await seedBot(t.db)).id,
        body: { ...op.body?.(), pad: "x".repeat(op.limitKb * 1024 + 1) },
      });
      expect(tooLarge.status).toBe(413);
      expectDocumented(name, tooLarge);

      const failed = await send(broken, op, { body: op.body?.() });
      expect(failed.status).toBe(500);
      expect(failed.body).toEqual({ error: "The request could not be completed; retry with backoff." });
      expectDocumented(name, failed);

      if (op.path.includes("{id}") || op.path.endsWith("/votes")) {
        const unknown = await send(app, op, { body: op.body?.() });
        expect(unknown.status).toBe(404);
        expect(unknown.body).toEqual({ error: "Bot not found." });
        expectDocumented(name, unknown);
      }
      if (op.path.includes("{id}")) {
        const badId = await send(app, op, { id: "not-an-id", body: op.body?.() });
        expect(badId.status).toBe(400);
        expect(badId.body).toEqual({ error: "The bot id must be a bot application id (17 to 19 digits)." });
        expectDocumented(name, badId);
      }
    },
  );

  it("every documented status of every operation was produced by a test above", () => {
    const missing = operationKeys().flatMap((operation) => {
      const [method, path] = operation.split(" ") as [string, string];
      const documented = Object.keys(doc.paths[path]?.[method.toLowerCase()]?.responses ?? {});
      const seen = observed.get(operation) ?? new Set();
      return documented.filter((status) => !seen.has(status)).map((status) => `${operation} ${status}`);
    });
    expect(missing).toEqual([]);
  });
});
