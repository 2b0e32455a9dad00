import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { createSecretBox, hashToken } from "@botdir/db";
import { createTestDatabase, randomBotId, seedBot, type TestDatabase } from "@botdir/db/testing";
import { runBotctl } from "../src/cli/botctl.js";
import { BOTCTL_CONNECT_TIMEOUT_MS } from "../src/env.js";
import { expectedList, seedDeliveries, TWELVE_ATTEMPTS } from "./support/attempts.js";

const keyHex = randomBytes(32).toString("hex");
const box = createSecretBox(Buffer.from(keyHex, "hex"));
let t: TestDatabase;
let env: Record<string, string>;

beforeAll(async () => {
  t = await createTestDatabase();
  env = { DATABASE_URL: t.url, SECRET_ENCRYPTION_KEY: keyHex };
});

afterAll(async () => {
  await t.drop();
});

const botctl = (...argv: string[]) => runBotctl(argv, env);
const botRow = (id: string) => t.db.prisma.bot.findUniqueOrThrow({ where: { id } });
/** The sentence botctl printed when it exited 1. */
const errorOf = (result: { output: unknown }) => (result.output as { error: string }).error;

/** `botctl webhook set <id> ...args` for a new approved bot, with `runEnv` (the file's by default). */
async function setOnNewBot(args: string[], runEnv: Record<string, string> = env) {
  const { id } = await seedBot(t.db);
  return { id, result: await runBotctl(["webhook", "set", id, ...args], runEnv) };
}

/** `botctl <command> <unknown id>` exits 1 with Bot not found. */
function itExitsOneForAnUnknownBot(command: string[], title = "when the bot does not exist, then exit 1") {
  it(title, async () => {
    expect(await botctl(...command, randomBotId())).toEqual({ code: 1, output: { error: "Bot not found." } });
  });
}

describe("botctl bot create", () => {
  it("when given a new id, then prints {id, status: pending} and exits 0", async () => {
    const id = randomBotId();
    expect(await botctl("bot", "create", id)).toEqual({ code: 0, output: { id, status: "pending" } });
    expect((await botRow(id)).status).toBe("pending");
  });

  it("when --approve is given, then the bot is approved", async () => {
    const id = randomBotId();
    expect(await botctl("bot", "create", id, "--approve")).toEqual({
      code: 0,
      output: { id, status: "approved" },
    });
  });

  it("when the id exists, then exit 1 with the conflict sentence", async () => {
    const { id } = await seedBot(t.db);
    expect(await botctl("bot", "create", id)).toEqual({
      code: 1,
      output: { error: "A bot with this id already exists." },
    });
  });

  it("when the id is invalid, then exit 1 naming it", async () => {
    expect(await botctl("bot", "create", "12ab")).toEqual({
      code: 1,
      output: { error: "The bot id must be a bot application id (17 to 19 digits)." },
    });
  });

  it("when an unknown flag is given, then exit 1 and nothing is created", async () => {
    const id = randomBotId();
    const result = await botctl("bot", "create", id, "--aprove");
    expect(result).toEqual({
      code: 1,
      output: { error: "Unknown option --aprove for `botctl bot create`." },
    });
    expect(await t.db.prisma.bot.findUnique({ where: { id } })).toBeNull();
  });
});

describe("botctl bot approve", () => {
  it("when the bot is pending, then prints {id, status: approved}", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    expect(await botctl("bot", "approve", id)).toEqual({ code: 0, output: { id, status: "approved" } });
    expect((await botRow(id)).status).toBe("approved");
  });

  itExitsOneForAnUnknownBot(
    ["bot", "approve"],
    "when the bot does not exist, then exit 1 with Bot not found.",
  );
});

describe("botctl token rotate", () => {
  it("when the bot is approved, then prints the token once, stores its hash, and the old hash is gone", async () => {
    const { id, token: oldToken } = await seedBot(t.db);
    const result = await botctl("token", "rotate", id);
    expect(result.code).toBe(0);
    const output = result.output as { id: string; token: string };
    expect(Object.keys(output).sort()).toEqual(["id", "token"]);
    expect(output.id).toBe(id);
    expect(output.token).not.toBe(oldToken);
    expect((await botRow(id)).tokenHash).toBe(hashToken(output.token));
    expect(await t.db.prisma.bot.findUnique({ where: { tokenHash: hashToken(oldToken!) } })).toBeNull();

    const again = (await botctl("token", "rotate", id)).output as { token: string };
    expect(again.token).not.toBe(output.token);
    expect((await botRow(id)).tokenHash).toBe(hashToken(again.token));
  });

  it("when the bot is pending, then exit 1 and no token is stored", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    expect(await botctl("token", "rotate", id)).toEqual({
      code: 1,
      output: { error: "The bot is not approved yet; only approved bots get a token." },
    });
    expect((await botRow(id)).tokenHash).toBeNull();
  });
});

describe("botctl webhook set", () => {
  it("when the URL is public https, then prints {id, url, secret} with a new encrypted secret each time", async () => {
    const { id } = await seedBot(t.db);
    const url = "https://93.184.216.34/hooks/votes";
    const first = await botctl("webhook", "set", id, url);
    const second = await botctl("webhook", "set", id, url);
    expect(first).toEqual({
      code: 0,
      output: { id, url, secret: expect.stringMatching(/^whsec_[0-9a-f]{64}$/) },
    });
    expect(second.code).toBe(0);
    const secret = (second.output as { secret: string }).secret;
    expect(secret).not.toBe((first.output as { secret: string }).secret);
    const row = await botRow(id);
    expect(row.webhookUrl).toBe(url);
    expect(row.webhookSecretEncrypted).not.toContain(secret.slice(6));
    expect(box.decrypt(row.webhookSecretEncrypted!)).toBe(secret);
  });

  it.each([
    ["https://[::1]/x", "loopback"],
    ["https://0x7f000001/x", "loopback"],
    ["https://169.254.169.254/latest", "link-local"],
    ["http://93.184.216.34/x", "https"],
  ])("when the URL is %s, then exit 1 with the refusal", async (url, words) => {
    const { id, result } = await setOnNewBot([url]);
    expect(result.code).toBe(1);
    expect(errorOf(result)).toContain(words);
    expect((await botRow(id)).webhookUrl).toBeNull();
  });

  it("when WEBHOOK_ALLOW_PRIVATE_TARGETS is true, then a local http URL is accepted", async () => {
    const { result } = await setOnNewBot(["http://127.0.0.1:9999/hook"], {
      ...env,
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    });
    expect(result.code).toBe(0);
    expect((result.output as { url: string }).url).toBe("http://127.0.0.1:9999/hook");
  });

  it("when the URL is missing, then exit 1 with usage", async () => {
    const { result } = await setOnNewBot([]);
    expect(result).toEqual({
      code: 1,
      output: { error: "Missing webhook URL. Usage: botctl webhook set <id> <url>" },
    });
  });

  it("when SECRET_ENCRYPTION_KEY is not set, then exit 1 naming it and nothing is stored", async () => {
    const { id, result } = await setOnNewBot(["https://93.184.216.34/x"], { DATABASE_URL: t.url });
    expect(result.code).toBe(1);
    expect(errorOf(result)).toContain("SECRET_ENCRYPTION_KEY");
    expect((await botRow(id)).webhookUrl).toBeNull();
  });
});

describe("botctl webhook clear", () => {
  it("when a webhook is set, then prints {id, url: null} and removes URL and secret", async () => {
    const { id } = await seedBot(t.db);
    await botctl("webhook", "set", id, "https://93.184.216.34/x");
    expect(await botctl("webhook", "clear", id)).toEqual({ code: 0, output: { id, url: null } });
    const row = await botRow(id);
    expect(row.webhookUrl).toBeNull();
    expect(row.webhookSecretEncrypted).toBeNull();
  });

  itExitsOneForAnUnknownBot(["webhook", "clear"]);
});

describe("botctl webhook deliveries", () => {
  it("when there are twelve attempts, then prints the ten newest, newest first", async () => {
    const { id } = await seedBot(t.db);
    const seeded = await seedDeliveries(t.db, id, new Date("2026-11-19T08:00:00.000Z"), TWELVE_ATTEMPTS);
    const result = await botctl("webhook", "deliveries", id);
    expect(result.code).toBe(0);
    const { attempts } = result.output as { attempts: Array<{ outcome: string; attemptedAt: string }> };
    expect(attempts).toHaveLength(10);
    expect(attempts).toEqual(expectedList(seeded));
    expect(attempts[0]?.attemptedAt).toBe("2026-11-19T08:11:00.000Z");
    expect(attempts.map((a) => a.outcome)).toContain("failed");
    expect(attempts[0]).toMatchObject({ event: "vote.available" });
  });

  it("when the bot has none, then prints an empty list", async () => {
    const { id } = await seedBot(t.db);
    expect(await botctl("webhook", "deliveries", id)).toEqual({ code: 0, output: { attempts: [] } });
  });
});

describe("botctl usage and environment", () => {
  it("when the command is unknown, then exit 1 with the usage", async () => {
    const result = await botctl("bot", "delete", randomBotId());
    expect(result.code).toBe(1);
    expect((result.output as { error: string }).error).toMatch(
      /^Unknown command\. Usage: .*webhook deliveries/,
    );
  });

  it("when DATABASE_URL is invalid, then exit 1 naming it", async () => {
    const result = await runBotctl(["bot", "approve", randomBotId()], { DATABASE_URL: "mysql://x" });
    expect(result).toEqual({
      code: 1,
      output: { error: "Invalid environment: DATABASE_URL must be a postgresql:// URL." },
    });
  });
});

describe("botctl and DB_CONNECT_TIMEOUT_MS", () => {
  /** A server that accepts TCP connections and never answers: PostgreSQL that does not respond. */
  let silent: Server;
  let silentUrl: string;
  const sockets = new Set<Socket>();
  beforeAll(async () => {
    silent = createServer((socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    silentUrl = `postgresql://postgres@127.0.0.1:${(silent.address() as AddressInfo).port}/botdir`;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  /** `botctl bot approve` against the silent server: its answer and how long it took. */
  async function approveAgainstSilent(extra: Record<string, string>) {
    const t0 = Date.now();
    const result = await runBotctl(["bot", "approve", randomBotId()], { DATABASE_URL: silentUrl, ...extra });
    return { result, ms: Date.now() - t0 };
  }

  it("when DB_CONNECT_TIMEOUT_MS is 300 and PostgreSQL does not answer, then exit 1 with PostgreSQL unreachable after about 300 ms, not botctl's default 5 s", async () => {
    const { result, ms } = await approveAgainstSilent({ DB_CONNECT_TIMEOUT_MS: "300" });
    expect(result).toEqual({ code: 1, output: { error: "PostgreSQL is unreachable." } });
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(BOTCTL_CONNECT_TIMEOUT_MS / 2);
  });

  it("when DB_CONNECT_TIMEOUT_MS is unset, then botctl waits its default (5 s) for a connection", async () => {
    const { result, ms } = await approveAgainstSilent({});
    expect(result).toEqual({ code: 1, output: { error: "PostgreSQL is unreachable." } });
    expect(ms).toBeGreaterThanOrEqual(BOTCTL_CONNECT_TIMEOUT_MS - 100);
  }, 30_000);

  it("when DB_CONNECT_TIMEOUT_MS is out of bounds, then exit 1 naming it", async () => {
    const result = await runBotctl(["bot", "approve", randomBotId()], {
      ...env,
      DB_CONNECT_TIMEOUT_MS: "50",
    });
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/^Invalid environment: DB_CONNECT_TIMEOUT_MS /);
  });
});

describe("the botctl executable", () => {
  const root = path.resolve(import.meta.dirname, "../../..");
  const cli = path.join(root, "apps/vote-ingest/src/cli/botctl.ts");
  const run = promisify(execFile);

  async function spawnBotctl(...argv: string[]): Promise<{ code: number; stdout: string }> {
    try {
      const { stdout } = await run(process.execPath, ["--import", "tsx", cli, ...argv], {
        cwd: root,
        env: { PATH: process.env.PATH ?? "", ...env },
      });
      return { code: 0, stdout };
    } catch (error) {
      const failed = error as { code: number; stdout: string };
      return { code: failed.code, stdout: failed.stdout };
    }
  }

  it("when a command succeeds, then one JSON line on stdout and exit 0", async () => {
    const id = randomBotId();
    const result = await spawnBotctl("bot", "create", id, "--approve");
    expect(result.code).toBe(0);
    expect(result.stdout.trim().split("\n")).toHaveLength(1);
    expect(JSON.parse(result.stdout)).toEqual({ id, status: "approved" });
    expect((await botRow(id)).status).toBe("approved");
  });

  it("when a command fails, then {error} on stdout and a non-zero exit", async () => {
    const { id } = await seedBot(t.db, { status: "pending" });
    const result = await spawnBotctl("token", "rotate", id);
    expect(result.code).not.toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      error: "The bot is not approved yet; only approved bots get a token.",
    });
  });
});
