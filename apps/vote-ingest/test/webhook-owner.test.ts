/**
 * Issue 14 (owner side): secret rotation with overlap, the test event, re-enabling a webhook
 * disabled as dead, and botctl's new commands and --help.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { createSecretBox } from "@botdir/db";
import { seedBot } from "@botdir/db/testing";
import { ManualClock } from "@botdir/service-kit";
import type { Resolver } from "@botdir/webhook-targets";
import type { Express } from "express";
import { Webhook } from "standardwebhooks";
import request from "supertest";
import { REFUSED_TARGET_HINT, runBotctl } from "../src/cli/botctl.js";
import { CliEnv } from "../src/env.js";
import { useIngestApp } from "./support/votes.js";

const KEY = `internal-${randomBytes(16).toString("hex")}`;
const keyHex = randomBytes(32).toString("hex");
const box = createSecretBox(Buffer.from(keyHex, "hex"));
const resolver: Resolver = async (host) => {
  if (host === "metadata.example.com") return ["169.254.169.254"];
  throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
};
const OVERLAP = 60 * 60 * 1000;

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}

let server: Server;
let status = 204;
const received: Received[] = [];
const clock = new ManualClock(new Date());
const t = useIngestApp({
  clock,
  internalApiKey: KEY,
  secretBox: box,
  allowPrivateTargets: true,
  webhookResolver: resolver,
  webhookSecretOverlapMs: OVERLAP,
});
let app: Express;
let hookUrl: string;

beforeAll(async () => {
  app = t.app();
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      res.statusCode = status;
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  hookUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  status = 204;
  clock.set(new Date());
});

const post = (path: string) => request(app).post(`/internal/v1/bots${path}`).set("Authorization", KEY);
const botRow = (id: string) => t.db.prisma.bot.findUniqueOrThrow({ where: { id } });

async function botWithWebhook(): Promise<{ id: string; secret: string }> {
  const { id } = await seedBot(t.db);
  const res = await request(app)
    .put(`/internal/v1/bots/${id}/webhook`)
    .set("Authorization", KEY)
    .send({ url: hookUrl });
  expect(res.status).toBe(200);
  return { id, secret: res.body.secret };
}

function verify(secret: string, r: Received) {
  return new Webhook(secret).verify(r.body, r.headers as Record<string, string>);
}

describe("secret rotation", () => {
  it("when the secret is rotated, then a new secret is shown once, the URL is unchanged, and during the overlap both secrets verify while Authorization is the new one", async () => {
    const { id, secret: old } = await botWithWebhook();
    const res = await post(`/${id}/webhook/secret`);
    expect(res.status).toBe(200);
    expect(res.headers["cache-control"]).toBe("no-store");
    expect(res.body).toEqual({ id, secret: expect.stringMatching(/^whsec_[0-9a-f]{64}$/) });
    const next: string = res.body.secret;
    expect(next).not.toBe(old);
    const row = await botRow(id);
    expect(row.webhookUrl).toBe(hookUrl);
    expect(row.webhookPreviousSecretUntil?.getTime()).toBe(clock.now().getTime() + OVERLAP);
    expect(row.webhookPreviousSecretEncrypted).not.toContain(old);

    const before = received.length;
    expect((await post(`/${id}/webhook/test`)).body.delivered).toBe(true);
    const got = received[before]!;
    expect(got.headers.authorization).toBe(next);
    expect(String(got.headers["webhook-signature"]).split(" ")).toHaveLength(2);
    expect(() => verify(next, got)).not.toThrow();
    expect(() => verify(old, got)).not.toThrow();
  });

  it("when the overlap has passed, then only the new secret verifies", async () => {
    const { id, secret: old } = await botWithWebhook();
    const next = (await post(`/${id}/webhook/secret`)).body.secret as string;
    await t.db.prisma.bot.update({
      where: { id },
      data: { webhookPreviousSecretUntil: new Date(clock.now().getTime() - 1) },
    });
    const before = received.length;
    await post(`/${id}/webhook/test`);
    const got = received[before]!;
    expect(() => verify(next, got)).not.toThrow();
    expect(() => verify(old, got)).toThrow(/No matching signature/);
  });

  it("when a new URL is set after a rotation, then the fresh secret has no overlap", async () => {
    const { id } = await botWithWebhook();
    await post(`/${id}/webhook/secret`);
    await request(app)
      .put(`/internal/v1/bots/${id}/webhook`)
      .set("Authorization", KEY)
      .send({ url: hookUrl });
    const row = await botRow(id);
    expect([row.webhookPreviousSecretEncrypted, row.webhookPreviousSecretUntil]).toEqual([null, null]);
  });

  it("when the bot is unknown or has no webhook, then 404 and 409", async () => {
    const { id } = await seedBot(t.db);
    expect((await post(`/${id}/webhook/secret`)).status).toBe(409);
    const unknown = await post("/123456789012345671/webhook/secret");
    expect([unknown.status, unknown.body]).toEqual([404, { error: "Bot not found." }]);
  });
});

describe("test event", () => {
  it("when the receiver answers 2xx, then delivered with its status, a webhook.test body the receiver can tell from a vote, no vote recorded, and a test entry in the attempt log", async () => {
    const { id, secret } = await botWithWebhook();
    const votesBefore = await t.db.prisma.vote.count({ where: { botId: id } });
    const before = received.length;

    const res = await post(`/${id}/webhook/test`);

    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      delivered: true,
      statusCode: 204,
      errorKind: null,
      durationMs: expect.any(Number),
    });
    const got = received[before]!;
    expect(got.headers["x-webhook-event"]).toBe("webhook.test");
    expect(got.headers["webhook-id"]).toBe(got.headers["x-webhook-delivery"]);
    expect(verify(secret, got)).toMatchObject({ event: "webhook.test", bot_id: id, test: true });
    expect(JSON.parse(got.body)).not.toHaveProperty("user_id");
    expect(got.headers["x-webhook-trace"]).toBe(String(got.headers["webhook-id"]).replaceAll("-", ""));
    expect(await t.db.prisma.vote.count({ where: { botId: id } })).toBe(votesBefore);
    expect(await t.db.prisma.delivery.count({ where: { botId: id } })).toBe(0);

    const log = await request(app)
      .get(`/internal/v1/bots/${id}/webhook/deliveries`)
      .set("Authorization", KEY);
    expect(log.body.attempts).toEqual([
      {
        deliveryId: got.headers["webhook-id"],
        attempt: 1,
        series: 0,
        statusCode: 204,
        errorKind: null,
        outcome: "delivered",
        deliveryState: "delivered",
        attemptedAt: clock.now().toISOString(),
        // No provider is registered in this test: the trace its id names, as X-Webhook-Trace said.
        traceId: String(got.headers["webhook-id"]).replaceAll("-", ""),
        test: true,
        event: null,
        recovered: false,
      },
    ]);
  });

  it("when the receiver answers 500, then not delivered with http_status, logged as a failed test", async () => {
    const { id } = await botWithWebhook();
    status = 500;
    const res = await post(`/${id}/webhook/test`);
    expect(res.body).toMatchObject({ delivered: false, statusCode: 500, errorKind: "http_status" });
    const log = await request(app)
      .get(`/internal/v1/bots/${id}/webhook/deliveries`)
      .set("Authorization", KEY);
    expect(log.body.attempts[0]).toMatchObject({ outcome: "failed", test: true, statusCode: 500 });
  });

  it("when the URL points to a private address and private targets are not allowed, then refused_target and nothing is sent", async () => {
    const strict = t.app({ allowPrivateTargets: false });
    for (const url of ["https://127.0.0.1:9/hook", "https://metadata.example.com/hook"]) {
      const { id } = await seedBot(t.db);
      // Stored before the rules (or the DNS answer) changed: the test event checks again.
      await t.db.prisma.bot.update({
        where: { id },
        data: { webhookUrl: url, webhookSecretEncrypted: box.encrypt(`whsec_${"ab".repeat(32)}`) },
      });
      const before = received.length;
      const res = await request(strict)
        .post(`/internal/v1/bots/${id}/webhook/test`)
        .set("Authorization", KEY);
      expect(res.body).toMatchObject({ delivered: false, statusCode: null, errorKind: "refused_target" });
      expect(received.length).toBe(before);
    }
  });

  it("when a bot sends more than five test events in a minute, then 429 with retryAfter, and again after the minute", async () => {
    const { id } = await botWithWebhook();
    for (let i = 0; i < 5; i++) expect((await post(`/${id}/webhook/test`)).status).toBe(200);
    const limited = await post(`/${id}/webhook/test`);
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({ error: expect.any(String), retryAfter: 60 });
    clock.advance(61_000);
    expect((await post(`/${id}/webhook/test`)).status).toBe(200);
  });
});

describe("disabled webhooks", () => {
  it("when the dispatcher disabled a dead webhook, then the listing shows state, reason and time, and enable (or setting the URL) re-enables it", async () => {
    const { id } = await botWithWebhook();
    const disabledAt = new Date(clock.now().getTime() - 1000);
    await t.db.prisma.bot.update({
      where: { id },
      data: { webhookDisabledAt: disabledAt, webhookDisabledReason: "dead_endpoint" },
    });
    const show = () => request(app).get(`/internal/v1/bots/${id}`).set("Authorization", KEY);
    expect((await show()).body).toMatchObject({
      webhook_state: "disabled",
      webhook_disabled_reason: "dead_endpoint",
      webhook_disabled_at: disabledAt.toISOString(),
    });

    const res = await post(`/${id}/webhook/enable`);
    expect([res.status, res.body]).toEqual([200, { id, state: "active" }]);
    expect((await show()).body).toMatchObject({
      webhook_state: "active",
      webhook_disabled_reason: null,
      webhook_disabled_at: null,
    });
    expect((await botRow(id)).webhookEnabledAt?.toISOString()).toBe(clock.now().toISOString());

    await t.db.prisma.bot.update({ where: { id }, data: { webhookDisabledAt: disabledAt } });
    await request(app)
      .put(`/internal/v1/bots/${id}/webhook`)
      .set("Authorization", KEY)
      .send({ url: hookUrl });
    expect((await show()).body.webhook_state).toBe("active");
  });

  it("when the webhook is disabled, then a vote is still recorded but queues no delivery", async () => {
    const { id } = await botWithWebhook();
    await t.db.prisma.bot.update({
      where: { id },
      data: { status: "approved", webhookDisabledAt: clock.now(), webhookDisabledReason: "dead_endpoint" },
    });
    const res = await request(app)
      .post("/internal/v1/votes")
      .set("Authorization", KEY)
      .send({ bot_id: id, user_id: "123456789012345678" });
    expect(res.status).toBe(201);
    expect(await t.db.prisma.vote.count({ where: { botId: id } })).toBe(1);
    expect(await t.db.prisma.delivery.count({ where: { botId: id } })).toBe(0);
  });

  it("when the bot has no webhook, then the state is null and enable is a 409", async () => {
    const { id } = await seedBot(t.db);
    const show = await request(app).get(`/internal/v1/bots/${id}`).set("Authorization", KEY);
    expect(show.body.webhook_state).toBeNull();
    expect((await post(`/${id}/webhook/enable`)).status).toBe(409);
  });
});

describe("a test event of a chosen kind", () => {
  it("when the test asks for vote.create or vote.available, then the receiver gets that event's signed body for the sample user, marked test", async () => {
    const { id, secret } = await botWithWebhook();
    const now = clock.now();
    for (const event of ["vote.create", "vote.available"]) {
      const before = received.length;
      const res = await post(`/${id}/webhook/test`).send({ event });
      expect(res.status).toBe(200);
      expect(res.body.delivered).toBe(true);
      const got = received[before]!;
      expect(got.headers["x-webhook-event"]).toBe(event);
      expect(verify(secret, got)).toBeTruthy();
      const vote = { bot_id: id, user_id: "000000000000000000" };
      expect(JSON.parse(got.body)).toEqual(
        event === "vote.create"
          ? { event, ...vote, voted_at: now.toISOString(), test: true }
          : {
              event,
              ...vote,
              voted_at: new Date(now.getTime() - 12 * 3_600_000).toISOString(),
              available_at: now.toISOString(),
              test: true,
            },
      );
    }
  });

  it("when no event is given, then it is webhook.test as before", async () => {
    const { id } = await botWithWebhook();
    const before = received.length;
    expect((await post(`/${id}/webhook/test`)).status).toBe(200);
    expect(received[before]?.headers["x-webhook-event"]).toBe("webhook.test");
  });
});

describe("botctl", () => {
  const env = () => ({
    DATABASE_URL: t.url,
    SECRET_ENCRYPTION_KEY: keyHex,
    WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
  });

  it("when rotate-secret, test and enable run, then they print what the endpoints answer", async () => {
    const { id } = await botWithWebhook();
    const rotated = await runBotctl(["webhook", "rotate-secret", id], env());
    expect(rotated).toEqual({
      code: 0,
      output: { id, secret: expect.stringMatching(/^whsec_[0-9a-f]{64}$/) },
    });
    const tested = await runBotctl(["webhook", "test", id], env());
    expect(tested).toEqual({
      code: 0,
      output: { delivered: true, statusCode: 204, errorKind: null, durationMs: expect.any(Number) },
    });
    expect(received.at(-1)?.headers.authorization).toBe((rotated.output as { secret: string }).secret);
    expect(await runBotctl(["webhook", "enable", id], env())).toEqual({
      code: 0,
      output: { id, state: "active" },
    });
  });

  it("when botctl sets the events and sends a test --event vote.available, then the events are stored and the receiver gets a vote.available", async () => {
    const { id } = await botWithWebhook();
    expect(await runBotctl(["webhook", "events", id, "vote.create,vote.available"], env())).toEqual({
      code: 0,
      output: { id, events: ["vote.create", "vote.available"] },
    });
    expect((await botRow(id)).webhookEvents).toEqual(["vote.create", "vote.available"]);
    expect(await runBotctl(["webhook", "events", id, "vote.create,vote.gone"], env())).toEqual({
      code: 1,
      output: { error: "events[1] must be a known event (vote.create, vote.available)." },
    });
    const before = received.length;
    const tested = await runBotctl(["webhook", "test", id, "--event", "vote.available"], env());
    expect(tested.code).toBe(0);
    expect(received[before]?.headers["x-webhook-event"]).toBe("vote.available");
    expect(await runBotctl(["webhook", "test", id, "--event", "vote.gone"], env())).toEqual({
      code: 1,
      output: { error: "event must be webhook.test, vote.create, vote.available." },
    });
  });

  it("when botctl sends a test event, then it carries X-Webhook-Trace and its attempt in the log has that trace id", async () => {
    const { id } = await botWithWebhook();
    const tested = await runBotctl(["webhook", "test", id], env());
    expect(tested.code).toBe(0);
    const got = received.at(-1)!;
    const traceId = got.headers["x-webhook-trace"];
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(traceId).not.toBe("0".repeat(32));
    const log = await request(app)
      .get(`/internal/v1/bots/${id}/webhook/deliveries`)
      .set("Authorization", KEY);
    expect(log.body.attempts).toEqual([
      expect.objectContaining({ deliveryId: got.headers["webhook-id"], test: true, traceId }),
    ]);
  });

  it("when the webhook is a local receiver and botctl runs without WEBHOOK_ALLOW_PRIVATE_TARGETS, then the refused test names the variable", async () => {
    const { id } = await botWithWebhook();
    const before = received.length;
    const { WEBHOOK_ALLOW_PRIVATE_TARGETS: _allowed, ...withoutIt } = env();
    const tested = await runBotctl(["webhook", "test", id], withoutIt);
    expect(tested).toEqual({
      code: 0,
      output: {
        delivered: false,
        statusCode: null,
        errorKind: "refused_target",
        durationMs: expect.any(Number),
        hint: REFUSED_TARGET_HINT,
      },
    });
    expect(REFUSED_TARGET_HINT).toContain("WEBHOOK_ALLOW_PRIVATE_TARGETS=true");
    expect(received.length).toBe(before);
  });

  it("when --help is given, then every command is listed on stdout and the exit code is 0", async () => {
    const root = path.resolve(import.meta.dirname, "../../..");
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--import", "tsx", path.join(root, "apps/vote-ingest/src/cli/botctl.ts"), "--help"],
      { cwd: root, env: { PATH: process.env.PATH ?? "" } },
    );
    for (const command of [
      "bot create",
      "bot approve",
      "token rotate",
      "webhook set",
      "webhook clear",
      "webhook deliveries",
      "webhook rotate-secret",
      "webhook test",
      "webhook redeliver",
      "webhook enable",
      "secrets reencrypt",
      "vote cast",
    ]) {
      expect(stdout).toContain(`botctl ${command}`);
    }
    // Every variable botctl reads is named, and the .env it shares with pnpm start.
    for (const variable of Object.keys(CliEnv.shape)) expect(stdout).toMatch(new RegExp(`\\b${variable}\\b`));
    expect(stdout).toContain(".env");
  });
});
