/**
 * The running stack for the Python SDK's end-to-end suite (packages/sdk-python/tests/e2e), started
 * by its pytest fixture: `node --import tsx e2e/src/python/stack.ts`.
 *
 * It migrates a template database as jest's global setup does, starts PostgreSQL's database, a
 * private Redis and the three apps from their build output (`dist/`, so run `pnpm build` first),
 * and prints one JSON line on stdout: `{"ready": true, "api", "ingest", "internalKey"}`. Then it
 * answers commands, one JSON object a line on stdin, with one JSON line each on stdout
 * (`{"id", "result"}` or `{"id", "error"}`):
 *
 * - `{"id", "op": "knownBot"}`: an approved bot with a token every API process accepts → `{id, token}`
 * - `{"id", "op": "webhookBot", "url", "secret"}`: an approved bot whose webhook is `url` (http and
 *   loopback allowed here), signed with `secret` → `{id, token, secret}`
 * - `{"id", "op": "setWebhookUrl", "botId", "url"}`: moves the bot's webhook, keeping its secret
 * - `{"id", "op": "seedVotes", "botId", "count", "startMs", "stepMs"}`: `count` votes written to the
 *   log (one user each, `stepMs` apart from `startMs`) → `[{user_id, voted_at}]`, oldest first
 * - `{"id", "op": "deliveries", "botId"}`: the bot's deliveries, oldest first → `[{id, state}]`
 *
 * When stdin closes (or on SIGTERM/SIGINT) it stops everything and exits. Logs go to stderr.
 */
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { randomUserId } from "@botdir/db/testing";
import { type Stack, startStack } from "../stack.js";

const log = (line: string) => process.stderr.write(`[python-stack] ${line}\n`);
const answer = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

type Hook = { default: () => Promise<void> };
const support = (file: string) =>
  pathToFileURL(fileURLToPath(new URL(`../../../packages/db/test-support/${file}`, import.meta.url))).href;
const setup = (await import(support("global-setup.mjs"))) as Hook;
const teardown = (await import(support("global-teardown.mjs"))) as Hook;

await setup.default();
let stack: Stack;
try {
  stack = await startStack({ privateRedis: true, dist: true });
} catch (error) {
  await teardown.default().catch(() => {});
  throw error;
}
log(`api ${stack.api.base}, vote-ingest ${stack.ingest.base}, dispatcher ${stack.dispatcher.base}`);

let stopping: Promise<void> | undefined;
function stop(): Promise<void> {
  stopping ??= (async () => {
    await stack.stop().catch((error: unknown) => log(`stop: ${String(error)}`));
    await teardown.default().catch((error: unknown) => log(`teardown: ${String(error)}`));
  })();
  return stopping;
}
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => void stop().then(() => process.exit(0)));
}

interface Command {
  id: number;
  op: string;
  [field: string]: unknown;
}

async function run(command: Command): Promise<unknown> {
  const text = (name: string) => {
    const value = command[name];
    if (typeof value !== "string" || value === "") throw new Error(`${command.op} needs ${name}`);
    return value;
  };
  const number = (name: string) => {
    const value = command[name];
    if (typeof value !== "number" || !Number.isFinite(value)) throw new Error(`${command.op} needs ${name}`);
    return value;
  };
  switch (command.op) {
    case "knownBot":
      return stack.knownBot();
    case "webhookBot":
      return stack.webhookBot(text("url"), text("secret"));
    case "setWebhookUrl":
      await stack.db.prisma.bot.update({ where: { id: text("botId") }, data: { webhookUrl: text("url") } });
      return null;
    case "seedVotes": {
      const botId = text("botId");
      const start = number("startMs");
      const step = number("stepMs");
      const log = Array.from({ length: number("count") }, (_, i) => ({
        botId,
        userId: randomUserId(),
        votedAt: new Date(start + i * step),
      }));
      await stack.db.prisma.vote.createMany({ data: log });
      return log.map((v) => ({ user_id: v.userId, voted_at: v.votedAt.toISOString() }));
    }
    case "deliveries":
      return (await stack.deliveries(text("botId"))).map((d) => ({ id: d.id, state: d.state }));
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

answer({ ready: true, api: stack.api.base, ingest: stack.ingest.base, internalKey: stack.keys.internalKey });

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (line.trim() === "") return;
  let command: Command;
  try {
    command = JSON.parse(line) as Command;
  } catch {
    answer({ id: null, error: "not JSON" });
    return;
  }
  run(command).then(
    (result) => answer({ id: command.id, result: result ?? null }),
    (error: unknown) => answer({ id: command.id, error: String(error) }),
  );
});
lines.once("close", () => void stop().then(() => process.exit(0)));
