/**
 * `pnpm botctl …`, the operator CLI. A thin shell over the same service modules as the internal
 * HTTP endpoints. Prints one JSON object on stdout; on failure prints {"error": "..."} and exits 1.
 */
import { createDb, type Db } from "@botdir/db";
import { ApiError, BotId, EnvError, parseOrThrow, systemClock } from "@botdir/schema";
import { loadCliEnv } from "../env.js";
import { createListings } from "../services/listings.js";

const USAGE = [
  "botctl bot create <id> [--approve]",
  "botctl bot approve <id>",
  "botctl token rotate <id>",
].join(" | ");

class UsageError extends Error {}

function botIdArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError(`Missing bot id. Usage: ${USAGE}`);
  return parseOrThrow(BotId, value, "The bot id");
}

type Handler = (args: string[], flags: Set<string>, db: Db) => Promise<unknown>;

function commands(db: Db): Record<string, Handler> {
  const listings = createListings({ db, clock: systemClock });
  return {
    "bot create": (args, flags) => listings.createBot(botIdArg(args[0]), { approve: flags.has("--approve") }),
    "bot approve": (args) => listings.approveBot(botIdArg(args[0])),
    "token rotate": (args) => listings.rotateToken(botIdArg(args[0])),
  };
}

function describeFailure(error: unknown): string {
  const text = String((error as Error)?.message ?? error);
  if (/ECONNREFUSED|Can't reach database|connection/i.test(text)) return "PostgreSQL is unreachable.";
  if (/does not exist/.test(text)) return "The database is missing or not migrated; run `pnpm db:migrate`.";
  return `Unexpected failure: ${text.split("\n").filter(Boolean).pop() ?? "unknown error"}`;
}

export async function runBotctl(argv: string[]): Promise<{ code: number; output: unknown }> {
  const flags = new Set(argv.filter((a) => a.startsWith("--")));
  const words = argv.filter((a) => !a.startsWith("--"));
  let db: Db | undefined;
  try {
    const env = loadCliEnv();
    db = createDb({ url: env.DATABASE_URL, poolMax: 2 });
    const table = commands(db);
    const key = words.slice(0, 2).join(" ");
    const handler = table[key];
    if (!handler) throw new UsageError(`Unknown command. Usage: ${USAGE}`);
    return { code: 0, output: await handler(words.slice(2), flags, db) };
  } catch (error) {
    if (error instanceof ApiError || error instanceof UsageError || error instanceof EnvError) {
      return { code: 1, output: { error: error.message } };
    }
    return { code: 1, output: { error: describeFailure(error) } };
  } finally {
    await db?.close();
  }
}

const { code, output } = await runBotctl(process.argv.slice(2));
process.stdout.write(`${JSON.stringify(output)}\n`);
process.exitCode = code;
