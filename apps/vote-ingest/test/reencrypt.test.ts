import { createCipheriv, randomBytes } from "node:crypto";
import { createSecretBox, keyIdOf } from "@botdir/db";
import { createTestDatabase, seedBot, type TestDatabase } from "@botdir/db/testing";
import { runBotctl } from "../src/cli/botctl.js";
import { reencryptSecrets } from "../src/cli/reencrypt.js";

const oldKey = randomBytes(32);
const newKey = randomBytes(32);
const ring = `${newKey.toString("hex")},${oldKey.toString("base64")}`;
let t: TestDatabase;

beforeEach(async () => {
  t = await createTestDatabase();
});

afterEach(async () => {
  await t.drop();
});

/** The pre-ring format (`v1`, no key id), as rows written before SECRET_ENCRYPTION_KEYS hold. */
function encryptV1(key: Buffer, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return ["v1", iv, cipher.getAuthTag(), data].map((b) => b.toString("base64url")).join(":");
}

async function botWithSecret(stored: string | null): Promise<string> {
  const { id } = await seedBot(t.db);
  await t.db.prisma.bot.update({
    where: { id },
    data: { webhookUrl: stored ? "https://example.com/hook" : null, webhookSecretEncrypted: stored },
  });
  return id;
}

/** `botctl secrets reencrypt` with the ring (new key first), its result and the lines it printed. */
async function reencrypt() {
  const lines: string[] = [];
  const result = await runBotctl(
    ["secrets", "reencrypt"],
    { DATABASE_URL: t.url, SECRET_ENCRYPTION_KEYS: ring },
    (l) => lines.push(l),
  );
  return { result, lines };
}

const stored = async (id: string) =>
  (await t.db.prisma.bot.findUniqueOrThrow({ where: { id } })).webhookSecretEncrypted as string;

describe("botctl secrets reencrypt", () => {
  it("when secrets are under an old key (v1 or v2), then each is re-encrypted under the first key, readable after the old key is removed, and a second run changes nothing", async () => {
    const oldBox = createSecretBox(oldKey);
    const secrets = new Map<string, string>();
    for (let i = 0; i < 5; i++) {
      const secret = `whsec_old_${i}`;
      secrets.set(await botWithSecret(i < 2 ? encryptV1(oldKey, secret) : oldBox.encrypt(secret)), secret);
    }
    const current = await botWithSecret(createSecretBox(newKey).encrypt("whsec_current"));
    secrets.set(current, "whsec_current");
    const before = await stored(current);
    await botWithSecret(null); // a bot without a webhook is not touched

    const { result, lines } = await reencrypt();
    expect(result).toEqual({ code: 0, output: { reencrypted: 5, alreadyCurrent: 1, unreadable: 0 } });
    expect(lines.at(-1)).toContain(
      `webhook_secret_encrypted: scanned 6; 5 re-encrypted, 1 already under key ${keyIdOf(newKey)}`,
    );
    expect(await stored(current)).toBe(before);

    const onlyNew = createSecretBox(newKey);
    for (const [id, secret] of secrets) {
      const value = await stored(id);
      expect(onlyNew.keyIdOf(value)).toBe(keyIdOf(newKey));
      expect(onlyNew.decrypt(value)).toBe(secret);
    }

    const { result: again } = await reencrypt();
    expect(again).toEqual({ code: 0, output: { reencrypted: 0, alreadyCurrent: 6, unreadable: 0 } });
  });

  it("when there are more secrets than a batch, then every batch is done and progress is reported per batch", async () => {
    const oldBox = createSecretBox(oldKey);
    for (let i = 0; i < 7; i++) await botWithSecret(oldBox.encrypt(`s${i}`));
    const lines: string[] = [];
    const box = createSecretBox([newKey, oldKey]);
    const summary = await reencryptSecrets(t.db, box, { batchSize: 3, progress: (l) => lines.push(l) });
    expect(summary).toEqual({ reencrypted: 7, alreadyCurrent: 0, unreadable: 0 });
    expect(lines.map((l) => l.split(";")[0])).toEqual([
      "webhook_secret_encrypted: scanned 3",
      "webhook_secret_encrypted: scanned 6",
      "webhook_secret_encrypted: scanned 7",
    ]);
  });

  it("when a rotation's previous secret is still signing, then it is re-encrypted too", async () => {
    const oldBox = createSecretBox(oldKey);
    const id = await botWithSecret(oldBox.encrypt("whsec_new"));
    await t.db.prisma.bot.update({
      where: { id },
      data: {
        webhookPreviousSecretEncrypted: oldBox.encrypt("whsec_previous"),
        webhookPreviousSecretUntil: new Date(Date.now() + 60_000),
      },
    });
    const summary = await reencryptSecrets(t.db, createSecretBox([newKey, oldKey]));
    expect(summary).toEqual({ reencrypted: 2, alreadyCurrent: 0, unreadable: 0 });
    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id } });
    const onlyNew = createSecretBox(newKey);
    expect(onlyNew.decrypt(row.webhookSecretEncrypted as string)).toBe("whsec_new");
    expect(onlyNew.decrypt(row.webhookPreviousSecretEncrypted as string)).toBe("whsec_previous");
  });

  it("when a secret is under no key of the ring, then it is left alone, named on stderr with its key id, and the exit is 1", async () => {
    const stranger = randomBytes(32);
    const lost = await botWithSecret(createSecretBox(stranger).encrypt("lost"));
    const fine = await botWithSecret(createSecretBox(oldKey).encrypt("fine"));
    const lostValue = await stored(lost);
    const { result, lines } = await reencrypt();
    expect(result).toEqual({ code: 1, output: { reencrypted: 1, alreadyCurrent: 0, unreadable: 1 } });
    expect(lines.join("\n")).toContain(
      `bot ${lost}: no configured key decrypts its secret (key id ${keyIdOf(stranger)})`,
    );
    expect(lines.join("\n")).not.toContain("lost\n");
    expect(await stored(lost)).toBe(lostValue);
    expect(createSecretBox(newKey).decrypt(await stored(fine))).toBe("fine");
  });

  it("when no key is configured or a key is malformed, then exit 1 naming the variable", async () => {
    expect(await runBotctl(["secrets", "reencrypt"], { DATABASE_URL: t.url }, () => {})).toEqual({
      code: 1,
      output: { error: "SECRET_ENCRYPTION_KEYS (or SECRET_ENCRYPTION_KEY) is not set." },
    });
    const bad = await runBotctl(
      ["secrets", "reencrypt"],
      { DATABASE_URL: t.url, SECRET_ENCRYPTION_KEYS: `${newKey.toString("hex")},${"a".repeat(44)}` },
      () => {},
    );
    expect(bad.code).toBe(1);
    expect((bad.output as { error: string }).error).toMatch(/^Invalid environment: SECRET_ENCRYPTION_KEYS /);
  });
});
