/**
 * Key rotation with the real apps (vote-ingest, dispatcher, botctl as processes) and a loopback
 * receiver: secrets written under the old key (v1 and v2 formats) keep being delivered after the
 * new key is added first, `botctl secrets reencrypt` moves every secret to the new key, and with
 * the old key removed every delivery still arrives, correctly signed.
 */
import { execFile } from "node:child_process";
import { createCipheriv, createHmac, randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { createSecretBox, keyIdOf } from "@botdir/db";
import { randomUserId } from "@botdir/db/testing";
import { type AppProcess, baseEnv, call, REPO_ROOT, startApp, waitFor } from "../../src/processes.js";
import { castVote, useStack } from "../../src/stack.js";

const newKey = randomBytes(32);
const stack = useStack({
  privateRedis: true,
  replicas: { api: 0, "vote-ingest": 0, "webhook-dispatcher": 0 },
}); // stack.keys.encryptionKey is the old key
let apps: AppProcess[] = [];

/** The environment with exactly the given key variable(s) (the stack default is SECRET_ENCRYPTION_KEY). */
function envWith(keyVars: Record<string, string>): Record<string, string> {
  const { SECRET_ENCRYPTION_KEY: _single, ...rest } = stack.env;
  return { ...rest, ...keyVars };
}

async function restartApps(env: Record<string, string>): Promise<AppProcess> {
  await Promise.all(apps.map((a) => a.stop()));
  apps = await Promise.all([startApp("vote-ingest", env), startApp("webhook-dispatcher", env)]);
  return apps[0] as AppProcess;
}

/** The pre-ring format (`v1`, no key id). */
function encryptV1(key: Buffer, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return ["v1", iv, cipher.getAuthTag(), data].map((b) => b.toString("base64url")).join(":");
}

interface Hooked {
  id: string;
  secret: string;
  path: string;
}

/** Casts one vote per bot and waits until each has arrived, signed with the bot's current secret. */
async function voteAndExpectDelivered(ingest: AppProcess, bots: Hooked[]): Promise<void> {
  const before = new Map(bots.map((b) => [b.id, stack.receiver.forPath(b.path).length]));
  for (const bot of bots) {
    expect((await castVote(ingest.base, stack.keys.internalKey, bot.id, randomUserId())).status).toBe(201);
  }
  for (const bot of bots) {
    const req = await waitFor(
      () => stack.receiver.forPath(bot.path)[before.get(bot.id) ?? 0],
      `a delivery for ${bot.path}`,
      20_000,
    );
    const expected = `sha256=${createHmac("sha256", bot.secret).update(req.body).digest("hex")}`;
    expect(req.headers["x-webhook-signature-256"]).toBe(expected);
  }
  for (const bot of bots) {
    await waitFor(
      async () => (await stack.deliveries(bot.id)).every((d) => d.state === "delivered"),
      `every delivery of ${bot.path} to be delivered`,
    );
  }
}

async function storedSecret(id: string): Promise<string> {
  return (await stack.db.prisma.bot.findUniqueOrThrow({ where: { id } })).webhookSecretEncrypted as string;
}

function botctl(env: Record<string, string>, ...argv: string[]) {
  return promisify(execFile)(
    process.execPath,
    ["--import", "tsx", "apps/vote-ingest/src/cli/botctl.ts", ...argv],
    {
      cwd: REPO_ROOT,
      env: { ...baseEnv(), ...env },
    },
  );
}

describe("key rotation", () => {
  it("when a new key is added first, secrets are re-encrypted and the old key is removed, then deliveries continue throughout", async () => {
    const oldHex = stack.keys.encryptionKeyHex;
    const newHex = newKey.toString("hex");

    // 1. Before: one key, SECRET_ENCRYPTION_KEY. One secret in the pre-ring v1 format, one v2.
    let ingest = await restartApps(envWith({ SECRET_ENCRYPTION_KEY: oldHex }));
    const a = await stack.webhookBot(stack.receiver.url("/a"), "whsec_a");
    const b = await stack.webhookBot(stack.receiver.url("/b"), "whsec_b");
    await stack.db.prisma.bot.update({
      where: { id: b.id },
      data: { webhookSecretEncrypted: encryptV1(stack.keys.encryptionKey, "whsec_b") },
    });
    const bots: Hooked[] = [
      { id: a.id, secret: a.secret, path: "/a" },
      { id: b.id, secret: b.secret, path: "/b" },
    ];
    expect(createSecretBox(stack.keys.encryptionKey).keyIdOf(await storedSecret(a.id))).toBe(
      keyIdOf(stack.keys.encryptionKey),
    );
    await voteAndExpectDelivered(ingest, bots);

    // 2. The new key first, the old one still decrypting; restart both apps.
    const ring = { SECRET_ENCRYPTION_KEYS: `${newHex},${oldHex}` };
    ingest = await restartApps(envWith(ring));
    // A webhook set now is encrypted under the new key.
    const c = await stack.webhookBot(stack.receiver.url("/c"));
    const set = await call(`${ingest.base}/internal/v1/bots/${c.id}/webhook`, {
      method: "PUT",
      headers: { authorization: stack.keys.internalKey },
      body: { url: stack.receiver.url("/c") },
    });
    expect(set.status).toBe(200);
    bots.push({ id: c.id, secret: (set.body as { secret: string }).secret, path: "/c" });
    expect(createSecretBox(newKey).keyIdOf(await storedSecret(c.id))).toBe(keyIdOf(newKey));
    await voteAndExpectDelivered(ingest, bots);

    // 3. Re-encrypt everything under the new key: JSON summary on stdout, progress on stderr.
    const run = await botctl(envWith(ring), "secrets", "reencrypt");
    expect(JSON.parse(run.stdout)).toEqual({ reencrypted: 2, alreadyCurrent: 1, unreadable: 0 });
    expect(run.stderr).toContain(`already under key ${keyIdOf(newKey)}`);
    for (const bot of bots)
      expect(createSecretBox(newKey).keyIdOf(await storedSecret(bot.id))).toBe(keyIdOf(newKey));

    // 4. The old key removed: every bot still gets its deliveries, signed with its own secret.
    ingest = await restartApps(envWith({ SECRET_ENCRYPTION_KEYS: newHex }));
    await voteAndExpectDelivered(ingest, bots);
    const again = await botctl(envWith({ SECRET_ENCRYPTION_KEYS: newHex }), "secrets", "reencrypt");
    expect(JSON.parse(again.stdout)).toEqual({ reencrypted: 0, alreadyCurrent: 3, unreadable: 0 });
    for (const bot of bots) {
      expect((await stack.deliveries(bot.id)).map((d) => d.state)).toEqual(
        bot.path === "/c" ? ["delivered", "delivered"] : ["delivered", "delivered", "delivered"],
      );
    }
  }, 300_000); // four restarts of two apps, each compiled by tsx on start

  it("when a key is not exactly 32 bytes, then the app exits at start with one line naming the variable", async () => {
    const bad = envWith({ SECRET_ENCRYPTION_KEYS: `${newKey.toString("hex")},${"a".repeat(44)}` });
    const failure = await promisify(execFile)(
      process.execPath,
      ["--import", "tsx", "apps/webhook-dispatcher/src/main.ts"],
      {
        cwd: REPO_ROOT,
        env: { ...baseEnv(), ...bad, DISPATCHER_PORT: "0" },
        timeout: 30_000,
      },
    ).then(
      () => null,
      (error: { code: number; stderr: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr.trim().split("\n")).toEqual([
      "Invalid environment: SECRET_ENCRYPTION_KEYS must be comma-separated 32-byte keys, each 64 hex characters or base64.",
    ]);
  }, 60_000);
});
