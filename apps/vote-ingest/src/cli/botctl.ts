/**
 * `pnpm botctl …`, the operator CLI. A thin shell over the same service modules as the internal
 * HTTP endpoints. Prints one JSON object on stdout; on failure prints {"error": "..."} and exits 1.
 * Progress of long commands (`secrets reencrypt`) goes to stderr.
 */
import { pathToFileURL } from "node:url";
import { createDb, type Db } from "@botdir/db";
import { ApiError, BotId, parseOrThrow, UserId } from "@botdir/schema";
import { EnvError, startTelemetry, systemClock, type Telemetry } from "@botdir/service-kit";
import { createDnsResolver } from "@botdir/webhook-targets";
import { CliEnv, loadCliEnv } from "../env.js";
import { SetWebhookEventsBody, TestEventBody } from "../schemas.js";
import { createListings, secretBoxFromEnv } from "../services/listings.js";
import type { TestOutcome } from "../services/webhook-test.js";
import { redeliverFromCli } from "./redeliver.js";
import { reencryptSecrets } from "./reencrypt.js";
import { castVoteFromCli } from "./vote-cast.js";

/** Every command with what it prints; `botctl --help` lists them (keep in step with `commands`). */
const COMMANDS: [string, string][] = [
  ["bot create <id> [--approve]", "submit a bot (pending, or approved at once)"],
  ["bot approve <id>", "approve a pending bot"],
  ["token rotate <id>", "a new API token, shown once; the old one stops working"],
  ["webhook set <id> <url>", "set the webhook URL; a new secret, shown once, no overlap"],
  ["webhook clear <id>", "remove the webhook URL and its secret"],
  ["webhook deliveries <id>", "the last ten delivery attempts, newest first (tests marked)"],
  [
    "webhook rotate-secret <id>",
    "a new secret, shown once; the previous one signs beside it for the overlap",
  ],
  ["webhook events <id> <event,…>", "the events the webhook receives: vote.create, vote.available"],
  [
    "webhook test <id> [--event <name>]",
    "send one signed webhook.test (or vote.create, vote.available) request now; prints its outcome",
  ],
  ["webhook redeliver <id> <deliveryId>", "five fresh attempts of a delivery, same id and body"],
  [
    "webhook recover <id> --since <time> [--until <time>]",
    "send again every vote of the window whose delivery did not succeed (14 days at most)",
  ],
  ["webhook recovery <id> <recoveryId>", "a recovery's counts: queued, delivered, failed, pending"],
  [
    "webhook enable <id> [--recover-since <time>]",
    "re-enable a webhook disabled as dead or gone (410); and recover the votes since then",
  ],
  ["secrets reencrypt", "re-encrypt stored webhook secrets under the current key"],
  ["vote cast <botId> <userId>", "cast a vote as the site does"],
];

const USAGE = COMMANDS.map(([usage]) => `botctl ${usage}`).join(" | ");

/** `botctl --help`: one command a line, on stdout. */
export const HELP = [
  "Usage: pnpm botctl <command> (prints one JSON object; exits 1 on failure)",
  "",
  "Commands:",
  ...COMMANDS.map(([usage, what]) => `  botctl ${usage.padEnd(37)} ${what}`),
  "",
  "Environment (pnpm botctl reads the repo's .env first, as pnpm start does; a variable already set",
  "in the shell wins):",
  ...wrap(Object.keys(CliEnv.shape).join(", "), 100).map((line) => `  ${line}`),
].join("\n");

/**
 * Added to a `webhook test` refused as a private or non-https target: the variable that allows it
 * in development, which botctl reads as well as the apps (a refusal here while the dispatcher
 * delivers means botctl runs without it).
 */
export const REFUSED_TARGET_HINT =
  "The URL is not a public https target. For a local receiver in development, set WEBHOOK_ALLOW_PRIVATE_TARGETS=true for botctl as for the apps (e.g. in .env, which pnpm start and pnpm botctl both read).";

/** Words of `text` in lines of at most `width` characters. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(" ")) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + 1 + word.length <= width)
      lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

/**
 * The process's tracing, started from the first command's environment as each app's main.ts does
 * (once: the SDK registers process-wide). A redelivery is then a trace of its own, whose
 * `webhook.redeliver` span links to the delivery's previous trace and whose context the row keeps
 * for the new series' hand-off and attempts; exported when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 */
let telemetry: Telemetry | undefined;

/**
 * Exports the spans still buffered, the CLI's last step; an unreachable collector delays the exit
 * by `waitMs` at most (its spans are dropped).
 */
export async function stopTelemetry(waitMs = 3_000): Promise<void> {
  const stopping = telemetry?.shutdown().catch(() => {});
  telemetry = undefined;
  if (!stopping) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([stopping, new Promise((resolve) => (timer = setTimeout(resolve, waitMs).unref()))]);
  clearTimeout(timer);
}

/** Flags each command accepts; any other flag is refused, so a typo cannot change the meaning. */
const FLAGS: Record<string, string[]> = {
  "bot create": ["--approve"],
  "webhook recover": ["--since", "--until"],
  "webhook enable": ["--recover-since"],
  "webhook test": ["--event"],
};

/** Options that take a value (`--since <time>` or `--since=<time>`), kept as `--since=<time>`. */
const VALUE_FLAGS = new Set(["--since", "--until", "--recover-since", "--event"]);

function joinValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const next = argv[i + 1];
    if (VALUE_FLAGS.has(arg) && next !== undefined && !next.startsWith("--")) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

/** The value of `--name=<value>` among the flags, or undefined. */
function flagValue(flags: Set<string>, name: string): string | undefined {
  for (const flag of flags) if (flag.startsWith(`${name}=`)) return flag.slice(name.length + 1);
  return undefined;
}

class UsageError extends Error {}

/** A command that prints its output and still exits 1. */
class ExitWith extends Error {
  constructor(readonly output: unknown) {
    super("exit 1");
  }
}

function botIdArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError(`Missing bot id. Usage: ${USAGE}`);
  return parseOrThrow(BotId, value, "The bot id");
}

function urlArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError("Missing webhook URL. Usage: botctl webhook set <id> <url>");
  return value;
}

type Handler = (args: string[], flags: Set<string>, db: Db) => Promise<unknown>;

function commands(db: Db, env: CliEnv, progress: (line: string) => void): Record<string, Handler> {
  const secretBox = secretBoxFromEnv(env);
  const listings = createListings({
    db,
    clock: systemClock,
    secretBox,
    allowPrivateTargets: env.WEBHOOK_ALLOW_PRIVATE_TARGETS,
    secretOverlapMs: env.WEBHOOK_SECRET_OVERLAP_MS,
    resolver: createDnsResolver({
      timeoutMs: env.WEBHOOK_DNS_TIMEOUT_MS,
      ...(env.WEBHOOK_DNS_SERVERS ? { servers: env.WEBHOOK_DNS_SERVERS } : {}),
    }),
    dnsTimeoutMs: env.WEBHOOK_DNS_TIMEOUT_MS,
  });
  return {
    "bot create": (args, flags) => listings.createBot(botIdArg(args[0]), { approve: flags.has("--approve") }),
    "bot approve": (args) => listings.approveBot(botIdArg(args[0])),
    "token rotate": (args) => listings.rotateToken(botIdArg(args[0])),
    "webhook set": (args) => listings.setWebhook(botIdArg(args[0]), urlArg(args[1])),
    "webhook clear": (args) => listings.clearWebhook(botIdArg(args[0])),
    "webhook deliveries": (args) => listings.listAttempts(botIdArg(args[0])),
    "webhook redeliver": (args) => {
      const botId = botIdArg(args[0]);
      if (args[1] === undefined) {
        throw new UsageError("Missing delivery id. Usage: botctl webhook redeliver <id> <deliveryId>");
      }
      return redeliverFromCli(
        {
          db,
          redisUrl: env.REDIS_URL,
          redisClusterNodes: env.REDIS_CLUSTER_NODES,
          secretBox,
          queuePrefix: env.QUEUE_PREFIX,
        },
        botId,
        args[1],
      );
    },
    "webhook rotate-secret": (args) => listings.rotateSecret(botIdArg(args[0])),
    "webhook events": (args) => {
      const botId = botIdArg(args[0]);
      if (args[1] === undefined) {
        throw new UsageError("Missing events. Usage: botctl webhook events <id> vote.create,vote.available");
      }
      const { events } = parseOrThrow(SetWebhookEventsBody, {
        events: args[1].split(",").map((e) => e.trim()),
      });
      return listings.setWebhookEvents(botId, events);
    },
    "webhook test": async (args, flags) => {
      const botId = botIdArg(args[0]);
      const { event } = parseOrThrow(TestEventBody, { event: flagValue(flags, "--event") });
      const outcome: TestOutcome & { hint?: string } = await listings.sendTestEvent(botId, event);
      if (outcome.errorKind === "refused_target" && !env.WEBHOOK_ALLOW_PRIVATE_TARGETS) {
        outcome.hint = REFUSED_TARGET_HINT;
      }
      return outcome;
    },
    "webhook enable": (args, flags) => {
      const recoverSince = flagValue(flags, "--recover-since");
      return listings.enableWebhook(botIdArg(args[0]), recoverSince === undefined ? {} : { recoverSince });
    },
    "webhook recover": (args, flags) => {
      const since = flagValue(flags, "--since");
      if (since === undefined) {
        throw new UsageError(
          "Missing --since. Usage: botctl webhook recover <id> --since <time> [--until <time>]",
        );
      }
      const until = flagValue(flags, "--until");
      return listings.recover(botIdArg(args[0]), { since, ...(until === undefined ? {} : { until }) });
    },
    "webhook recovery": (args) => {
      const botId = botIdArg(args[0]);
      if (args[1] === undefined) {
        throw new UsageError("Missing recovery id. Usage: botctl webhook recovery <id> <recoveryId>");
      }
      return listings.getRecovery(botId, args[1]);
    },
    "vote cast": (args) => {
      const botId = botIdArg(args[0]);
      if (args[1] === undefined) throw new UsageError(`Missing user id. Usage: ${USAGE}`);
      return castVoteFromCli(
        {
          db,
          redisUrl: env.REDIS_URL,
          redisClusterNodes: env.REDIS_CLUSTER_NODES,
          queuePrefix: env.QUEUE_PREFIX,
        },
        botId,
        parseOrThrow(UserId, args[1], "The user id"),
      );
    },
    "secrets reencrypt": async () => {
      if (!secretBox) throw new UsageError("SECRET_ENCRYPTION_KEYS (or SECRET_ENCRYPTION_KEY) is not set.");
      const summary = await reencryptSecrets(db, secretBox, { progress });
      // Secrets no key decrypts stay as they are: exit 1, so `reencrypt && remove the old key` stops.
      if (summary.unreadable > 0) throw new ExitWith(summary);
      return summary;
    },
  };
}

/** `--help`, `-h` or `help` anywhere before a command word, or nothing at all. */
export function wantsHelp(argv: readonly string[]): boolean {
  return argv.length === 0 || argv[0] === "help" || argv.includes("--help") || argv.includes("-h");
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
  progress: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<{ code: number; output: unknown }> {
  const joined = joinValues(argv);
  const flags = new Set(joined.filter((a) => a.startsWith("--")));
  const words = joined.filter((a) => !a.startsWith("--"));
  let db: Db | undefined;
  try {
    const env = loadCliEnv(source);
    // A command exports once, as it ends: sent from this thread, with no worker to start first.
    telemetry ??= startTelemetry(env, { exportThread: false });
    db = createDb({
      url: env.DATABASE_URL,
      directUrl: env.DATABASE_DIRECT_URL ?? env.DATABASE_URL,
      preparedStatements: env.DB_PREPARED_STATEMENTS,
      poolMax: 2,
      connectionTimeoutMs: env.DB_CONNECT_TIMEOUT_MS,
    });
    const table = commands(db, env, progress);
    const key = words.slice(0, 2).join(" ");
    const handler = table[key];
    if (!handler) throw new UsageError(`Unknown command. Usage: ${USAGE}`);
    const unknownFlag = [...flags].find((flag) => !(FLAGS[key] ?? []).includes(flag.split("=")[0] as string));
    if (unknownFlag) throw new UsageError(`Unknown option ${unknownFlag} for \`botctl ${key}\`.`);
    return { code: 0, output: await handler(words.slice(2), flags, db) };
  } catch (error) {
    // An ApiError prints its whole body, e.g. the 409 of `vote cast` carries nextVoteAt.
    if (error instanceof ApiError) return { code: 1, output: error.body() };
    if (error instanceof ExitWith) return { code: 1, output: error.output };
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
  const argv = process.argv.slice(2);
  if (wantsHelp(argv)) {
    process.stdout.write(`${HELP}\n`);
    process.exit(0);
  }
  const { code, output } = await runBotctl(argv);
  process.stdout.write(`${JSON.stringify(output)}\n`);
  await stopTelemetry();
  process.exitCode = code;
}
