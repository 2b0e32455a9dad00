/**
 * `pnpm botctl …`, the operator CLI. A thin shell over the same service modules as the internal
 * HTTP endpoints. Prints one JSON object on stdout; on failure prints {"error": "..."} and exits 1.
 */
import { pathToFileURL } from "node:url";
import { createDb, type Db } from "@botdir/db";
import { ApiError, BotId, EnvError, parseOrThrow, systemClock, UserId } from "@botdir/schema";
import { type CliEnv, loadCliEnv } from "../env.js";
import { createListings, secretBoxFromKey } from "../services/listings.js";
import { castVoteFromCli } from "./vote-cast.js";

const USAGE = [
  "botctl bot create <id> [--approve]",
  "botctl bot approve <id>",
  "botctl token rotate <id>",
  "botctl webhook set <id> <url>",
  "botctl webhook clear <id>",
  "botctl webhook deliveries <id>",
  "botctl vote cast <botId> <userId>",
].join(" | ");

/** Flags each command accepts; any other flag is refused, so a typo cannot change the meaning. */
const FLAGS: Record<string, string[]> = { "bot create": ["--approve"] };

class UsageError extends Error {}

function botIdArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError(`Missing bot id. Usage: ${USAGE}`);
  return parseOrThrow(BotId, value, "The bot id");
}

function urlArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError("Missing webhook URL. Usage: botctl webhook set <id> <url>");
  return value;
}

type Handler = (args: string[], flags: Set<string>, db: Db) => Promise<unknown>;

function commands(db: Db, env: CliEnv): Record<string, Handler> {
  const listings = createListings({
    db,
    clock: systemClock,
    secretBox: secretBoxFromKey(env.SECRET_ENCRYPTION_KEY),
    allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS,
  });
  return {
    "bot create": (args, flags) => listings.createBot(botIdArg(args[0]), { approve: flags.has("--approve") }),
    "bot approve": (args) => listings.approveBot(botIdArg(args[0])),
    "token rotate": (args) => listings.rotateToken(botIdArg(args[0])),
    "webhook set": (args) => listings.setWebhook(botIdArg(args[0]), urlArg(args[1])),
    "webhook clear": (args) => listings.clearWebhook(botIdArg(args[0])),
    "webhook deliveries": (args) => listings.listAttempts(botIdArg(args[0])),
    "vote cast": (args) => {
      const botId = botIdArg(args[0]);
      if (args[1] === undefined) throw new UsageError(`Missing user id. Usage: ${USAGE}`);
      return castVoteFromCli(
        { db, redisUrl: env.REDIS_URL, queuePrefix: env.QUEUE_PREFIX },
        botId,
        parseOrThrow(UserId, args[1], "The user id"),
      );
    },
  };
}

function describeFailure(error: unknown): string {
  const text = String((error as Error)?.message ?? error);
  if (/ECONNREFUSED|Can't reach database|connection/i.test(text)) return "PostgreSQL is unreachable.";
  if (/does not exist/.test(text)) return "The database is missing or not migrated; run `pnpm db:migrate`.";
  return `Unexpected failure: ${text.split("\n").filter(Boolean).pop() ?? "unknown error"}`;
}

/**
 * Runs one command. `source` is the environment to read (default: process.env, through env.ts);
 * tests pass their own.
 */
export async function runBotctl(
  argv: string[],
  source?: Record<string, string | undefined>,
): Promise<{ code: number; output: unknown }> {
  const flags = new Set(argv.filter((a) => a.startsWith("--")));
  const words = argv.filter((a) => !a.startsWith("--"));
  let db: Db | undefined;
  try {
    const env = loadCliEnv(source);
    db = createDb({ url: env.DATABASE_URL, poolMax: 2 });
    const table = commands(db, env);
    const key = words.slice(0, 2).join(" ");
    const handler = table[key];
    if (!handler) throw new UsageError(`Unknown command. Usage: ${USAGE}`);
    const unknownFlag = [...flags].find((flag) => !(FLAGS[key] ?? []).includes(flag));
    if (unknownFlag) throw new UsageError(`Unknown option ${unknownFlag} for \`botctl ${key}\`.`);
    return { code: 0, output: await handler(words.slice(2), flags, db) };
  } catch (error) {
    // An ApiError prints its whole body, e.g. the 409 of `vote cast` carries nextVoteAt.
    if (error instanceof ApiError) return { code: 1, output: error.body() };
    if (error instanceof UsageError || error instanceof EnvError) {
      return { code: 1, output: { error: error.message } };
    }
    return { code: 1, output: { error: describeFailure(error) } };
  } finally {
    await db?.close();
  }
}

// Run only when executed (`pnpm botctl`, `node --import tsx botctl.ts`), not when a test imports it.
const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  const { code, output } = await runBotctl(process.argv.slice(2));
  process.stdout.write(`${JSON.stringify(output)}\n`);
  process.exitCode = code;
}
