/**
 * `pnpm test:runtimes`: the published SDK on every runtime it names. Builds the apps and the SDK
 * (`--no-build` skips it), installs Node.js 18 and 20, Bun, Deno and workerd from npm when missing
 * (install.ts), packs the SDK and installs the tarball into an empty project outside the
 * repository (packages/sdk/scripts/install-packed.mjs, as its package test does), and starts the
 * stack: a database of its own, the three apps from dist/ with private webhook targets allowed.
 * Then, one runtime at a time, the owner's program (programs/: the same app.mjs behind each
 * runtime's own server on a free loopback port):
 *   - verifyWebhook: a vote's real delivery from the dispatcher to /verify, verified, answered 204;
 *   - fetchWebhook: another bot's real delivery to the receiver at /fetch, handed to onVote;
 *   - refusals: a tampered copy of a signed vote (401) and a chunked body over the cap (413);
 *   - BotDirClient: stats, commands, check, hasVoted, votes and the delivery log against the
 *     running API, then stats posts until the API's real 429 (the stats limit, 60 a minute).
 * One line per runtime; exit 1 when any runtime fails, with that runtime's output. For work on one
 * runtime, `--only=deno,workerd` runs those alone (CI runs them all).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { randomUserId } from "@botdir/db/testing";
import { waitFor } from "@botdir/service-kit/testing";
import { standardHeaders } from "@botdir/signing";
import { freePort } from "@botdir/test-stores";
import { installPackedSdk } from "../../../packages/sdk/scripts/install-packed.mjs";
import { REPO_ROOT } from "../processes.js";
import { type Stack, startStack } from "../stack.js";
import { ensureRuntimes, RUNTIME_NAMES, type RuntimeName } from "./install.js";

const started = Date.now();
const elapsed = () => ((Date.now() - started) / 1000).toFixed(1);
const log = (line: string) => process.stdout.write(`[runtimes ${elapsed()} s] ${line}\n`);
const PROGRAMS = join(REPO_ROOT, "e2e/src/runtimes/programs");
const { NODE_OPTIONS: _tsx, ...hostEnv } = process.env;

/** Runs a database step of jest's global setup or teardown (plain ESM outside the TypeScript graph). */
async function testDatabases(step: "global-setup" | "global-teardown"): Promise<void> {
  const url = pathToFileURL(join(REPO_ROOT, `packages/db/test-support/${step}.mjs`)).href;
  const module = (await import(url)) as { default: () => Promise<void> };
  await module.default();
}

interface Running {
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/** The environment of an owner's program: no variable of this repository's tooling. */
function programEnv(vars: Record<string, string>): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/tmp",
    ...vars,
  };
}

/** The owner's program on `runtime`, its server on `port`. */
function startProgram(
  runtime: RuntimeName,
  bin: string,
  app: string,
  port: number,
  vars: Record<string, string>,
): Running {
  let args: string[];
  let env = programEnv({ PORT: String(port), ...vars });
  if (runtime === "node18" || runtime === "node20") args = ["node.mjs"];
  else if (runtime === "bun") args = ["bun.mjs"];
  else if (runtime === "deno") {
    args = ["run", "--allow-net", "--allow-env", "--allow-read", "deno.mjs"];
    env = { ...env, DENO_DIR: join(app, ".deno"), DENO_NO_UPDATE_CHECK: "1", DENO_NO_PROMPT: "1" };
  } else {
    writeFileSync(join(app, "workerd.capnp"), workerdConfig(port, vars));
    args = ["serve", "workerd.capnp"];
  }
  const child = spawn(bin, args, { cwd: app, env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-20_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    child,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * workerd's configuration: the worker's modules (the SDK's ESM bundle from the installed package
 * under its bare name), its settings as text bindings, one HTTP socket on loopback, and a
 * `network` service allowing `local` addresses as the worker's outbound, without which its fetch
 * could not reach the API on 127.0.0.1.
 */
function workerdConfig(port: number, vars: Record<string, string>): string {
  const bindings = Object.entries(vars)
    .map(([name, value]) => `    (name = ${JSON.stringify(name)}, text = ${JSON.stringify(value)}),`)
    .join("\n");
  // The schema's path is interpolated so that scripts/check-deps.mjs does not read it as an import.
  const schema = JSON.stringify("/workerd/workerd.capnp");
  return `using Workerd = import ${schema};

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "loopback", network = (allow = ["public", "local"])),
  ],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
);

const worker :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "app.mjs", esModule = embed "app.mjs"),
    (name = "@botdir/sdk", esModule = embed "node_modules/@botdir/sdk/dist/index.js"),
  ],
  compatibilityDate = "2026-11-01",
  bindings = [
${bindings}
  ],
  globalOutbound = "loopback",
);
`;
}

async function getJson<T>(url: string, init: RequestInit = {}, timeoutMs = 10_000): Promise<T> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${url}: ${res.status} ${text.slice(0, 500)}`);
  return JSON.parse(text) as T;
}

/** The bot's first delivery once it is final; throws unless it was delivered. */
async function delivered(stack: Stack, botId: string, what: string) {
  const delivery = await waitFor(
    async () => {
      const [first] = await stack.deliveries(botId);
      return first && first.state !== "pending" ? first : null;
    },
    `the delivery to ${what}`,
    60_000,
    50,
  );
  if (delivery.state !== "delivered") {
    const attempts = await stack.attempts(delivery.id);
    const seen = attempts.map((a) => a.statusCode ?? a.errorKind).join(", ");
    throw new Error(`the delivery to ${what} ended ${delivery.state} (attempts: ${seen})`);
  }
  return delivery;
}

interface Handled {
  route: "verify" | "fetch";
  deliveryId: string;
  vote: { event: string; bot_id: string; user_id: string };
}

type Outcome<T> = { ok: T; error?: undefined } | { ok?: undefined; error: Record<string, unknown> };

interface ClientReport {
  postStats: Outcome<unknown>;
  putCommands: Outcome<unknown>;
  check: Outcome<{ voted: number; hasVoted: boolean }>;
  hasVotedOther: Outcome<boolean>;
  votes: Outcome<{ user_id: string }[]>;
  webhookDeliveries: Outcome<{ deliveryId: string; statusCode: number | null }[]>;
  rateLimit: { posts: number; error: Record<string, unknown> | null };
}

/** The vote that `route` handed on for `deliveryId`, or an error naming what it got instead. */
function expectHandled(
  handled: Handled[],
  route: Handled["route"],
  deliveryId: string,
  bot: string,
  user: string,
) {
  const match = handled.find((h) => h.route === route && h.deliveryId === deliveryId);
  if (!match)
    throw new Error(`${route}: delivery ${deliveryId} was not handed on (got ${JSON.stringify(handled)})`);
  const { event, bot_id, user_id } = match.vote;
  if (event !== "vote.create" || bot_id !== bot || user_id !== user) {
    throw new Error(`${route}: delivery ${deliveryId} carried ${JSON.stringify(match.vote)}`);
  }
}

/**
 * What the receivers must refuse, sent straight to the runtime's server: a copy of a correctly
 * signed vote with its user changed (verifyWebhook: 401, invalid_signature, not handed on) and a
 * body over the 64 KiB cap sent chunked, with no Content-Length (fetchWebhook: 413).
 */
async function expectRefusals(
  base: string,
  botId: string,
  secrets: { verify: string; fetch: string },
): Promise<void> {
  const id = `refusal-${randomBytes(6).toString("hex")}`;
  const body = JSON.stringify({
    event: "vote.create",
    bot_id: botId,
    user_id: randomUserId(),
    voted_at: new Date().toISOString(),
  });
  const headers = {
    "content-type": "application/json",
    ...standardHeaders([secrets.verify], id, new Date(), body),
  };
  const tampered = body.replace(/"user_id":"\d/, '"user_id":"9');
  const refused = await fetch(`${base}/verify`, {
    method: "POST",
    headers,
    body: tampered,
    signal: AbortSignal.timeout(10_000),
  });
  const reason = ((await refused.json().catch(() => ({}))) as { reason?: string }).reason;
  if (refused.status !== 401 || reason !== "invalid_signature") {
    throw new Error(`verify: a tampered copy got ${refused.status} ${reason}, not 401 invalid_signature`);
  }
  if ((await getJson<Handled[]>(`${base}/log`)).some((h) => h.deliveryId === id)) {
    throw new Error("verify: a tampered copy was handed on");
  }
  // A chunked 70 KiB body: the receiver answers 413 once it passes its limit, without reading the
  // rest, and may close the connection while the body is still being written. fetch then fails on
  // the write (EPIPE) before it reads the answer; Node's http client reads the early answer.
  const chunk = new Uint8Array(1024).fill(0x20);
  const status = await new Promise<number>((resolve, reject) => {
    const req = httpRequest(
      `${base}/fetch`,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...standardHeaders([secrets.fetch], id, new Date(), "{}"),
        },
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    // A write that fails after the answer came is the early close above; before it, a failure.
    req.on("error", reject);
    req.on("timeout", () => req.destroy(new Error("the chunked body's answer timed out")));
    let sent = 0;
    const writeMore = () => {
      while (sent < 70) {
        sent += 1;
        if (!req.write(chunk)) return void req.once("drain", writeMore);
      }
      req.end();
    };
    writeMore();
  });
  if (status !== 413) throw new Error(`fetch receiver: a chunked 70 KiB body got ${status}, not 413`);
}

/** Every client call answered as the API does; returns the requests made until the 429. */
function expectClient(report: ClientReport, voter: string, deliveryId: string): number {
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  const problems: string[] = [];
  const failed = (name: string, outcome: Outcome<unknown>) =>
    outcome.error
      ? `${name} threw ${JSON.stringify(outcome.error)}`
      : `${name} gave ${JSON.stringify(outcome.ok)}`;
  if (!same(report.postStats.ok, { success: true, server_count: 1482 }))
    problems.push(failed("postStats", report.postStats));
  if (!same(report.putCommands.ok, { success: true, count: 1 }))
    problems.push(failed("putCommands", report.putCommands));
  if (report.check.ok?.voted !== 1 || report.check.ok.hasVoted !== true)
    problems.push(failed("check", report.check));
  if (report.hasVotedOther.ok !== false) problems.push(failed("hasVoted", report.hasVotedOther));
  if (!report.votes.ok?.some((v) => v.user_id === voter)) problems.push(failed("votes", report.votes));
  if (!report.webhookDeliveries.ok?.some((a) => a.deliveryId === deliveryId && a.statusCode === 204))
    problems.push(failed("webhookDeliveries", report.webhookDeliveries));
  const limited = report.rateLimit.error;
  const retryAfter = limited?.retryAfter;
  if (
    limited?.apiError !== true ||
    limited.status !== 429 ||
    limited.message !== "Rate limit exceeded." ||
    typeof retryAfter !== "number" ||
    retryAfter < 1 ||
    retryAfter > 60
  ) {
    problems.push(
      `no ApiError 429 with retryAfter after ${report.rateLimit.posts} stats posts: ${JSON.stringify(limited)}`,
    );
  }
  if (problems.length > 0) throw new Error(`client: ${problems.join("; ")}`);
  return report.rateLimit.posts + 1;
}

/** One runtime through the three checks; resolves with its line. */
async function checkRuntime(runtime: RuntimeName, bin: string, app: string, stack: Stack): Promise<string> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const secret = () => `whsec_${randomBytes(32).toString("hex")}`;
  const verifyBot = await stack.webhookBot(`${base}/verify`, secret());
  const fetchBot = await stack.webhookBot(`${base}/fetch`, secret());
  const program = startProgram(runtime, bin, app, port, {
    VERIFY_SECRET: verifyBot.secret,
    FETCH_SECRET: fetchBot.secret,
    API_BASE: stack.api.base,
    BOT_ID: verifyBot.id,
    BOT_TOKEN: verifyBot.token,
  });
  const steps: string[] = [];
  try {
    const health = await waitFor(
      async () => {
        if (program.child.exitCode !== null) throw new Error(`${runtime} exited`);
        return getJson<{ runtime: string }>(`${base}/health`, {}, 2_000);
      },
      `${runtime} to listen on ${port}`,
      60_000,
      100,
    );
    const [voter, fetchVoter] = [randomUserId(), randomUserId()];
    for (const [bot, user] of [
      [verifyBot.id, voter],
      [fetchBot.id, fetchVoter],
    ] as const) {
      const vote = await stack.vote(bot, user);
      if (vote.status !== 201) throw new Error(`casting a vote answered ${vote.status} ${vote.text}`);
    }
    const toVerify = await delivered(stack, verifyBot.id, "verifyWebhook");
    const toFetch = await delivered(stack, fetchBot.id, "the fetch receiver");
    // The receivers are told of a vote before they answer (or, at the latest, right after).
    const handled = await waitFor(
      async () => {
        const all = await getJson<Handled[]>(`${base}/log`);
        return all.filter((h) => h.deliveryId === toVerify.id || h.deliveryId === toFetch.id).length >= 2
          ? all
          : null;
      },
      "both votes to be handed on",
      15_000,
      50,
    ).catch(async () => getJson<Handled[]>(`${base}/log`));
    expectHandled(handled, "verify", toVerify.id, verifyBot.id, voter);
    expectHandled(handled, "fetch", toFetch.id, fetchBot.id, fetchVoter);
    await expectRefusals(base, verifyBot.id, { verify: verifyBot.secret, fetch: fetchBot.secret });
    steps.push("verify ok", "fetch receiver ok", "refusals ok (tampered 401, chunked 70 KiB 413)");
    const report = await getJson<ClientReport>(
      `${base}/client`,
      {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ voterId: voter, otherUserId: randomUserId() }),
      },
      60_000,
    );
    const requests = expectClient(report, voter, toVerify.id);
    steps.push(`client ok (429 seen after ${requests} stats posts)`);
    return `runtime ${runtime}: ${steps.join(", ")} [${health.runtime}]`;
  } catch (error) {
    const done = steps.length > 0 ? `${steps.join(", ")}, then ` : "";
    throw new Error(
      `runtime ${runtime}: ${done}FAILED: ${(error as Error).message}\n--- ${runtime} output ---\n${program.output().slice(-4000)}`,
    );
  } finally {
    await program.stop();
  }
}

/** The runtimes named by `--only=a,b` (all by default); an unknown name is an error. */
function chosenRuntimes(): RuntimeName[] {
  const only = process.argv.find((a) => a.startsWith("--only="))?.slice("--only=".length);
  if (!only) return RUNTIME_NAMES;
  const names = only.split(",");
  const unknown = names.filter((n) => !RUNTIME_NAMES.includes(n as RuntimeName));
  if (unknown.length > 0)
    throw new Error(`unknown runtime ${unknown.join(", ")} (${RUNTIME_NAMES.join(", ")})`);
  return names as RuntimeName[];
}

async function main(): Promise<number> {
  const chosen = chosenRuntimes();
  if (!process.argv.includes("--no-build")) {
    log("building the SDK and the apps (turbo run build)");
    const built = spawnSync("pnpm", ["exec", "turbo", "run", "build", "--output-logs=errors-only"], {
      cwd: REPO_ROOT,
      stdio: ["ignore", "inherit", "inherit"],
    });
    if (built.status !== 0) {
      process.stdout.write("runtimes: FAILED: the build failed\n");
      return 1;
    }
  }
  const bins = await ensureRuntimes(log);
  const work = mkdtempSync(join(tmpdir(), "botdir-runtimes-"));
  let stack: Stack | undefined;
  let failures = 0;
  try {
    const { app } = await installPackedSdk(work, hostEnv);
    for (const file of readdirSync(PROGRAMS)) copyFileSync(join(PROGRAMS, file), join(app, file));
    log(`the packed SDK installed into ${app}; starting the stack from dist/`);
    await testDatabases("global-setup");
    stack = await startStack({ dist: true });
    for (const runtime of chosen) {
      try {
        process.stdout.write(`${await checkRuntime(runtime, bins[runtime], app, stack)}\n`);
      } catch (error) {
        failures += 1;
        process.stdout.write(`${(error as Error).message}\n`);
      }
    }
  } finally {
    await stack?.stop();
    await testDatabases("global-teardown");
    rmSync(work, { recursive: true, force: true });
  }
  const total = chosen.length;
  process.stdout.write(
    failures === 0
      ? `runtimes: the packed SDK verified on ${total === RUNTIME_NAMES.length ? "all " : ""}${total} runtimes in ${elapsed()} s\n`
      : `runtimes: FAILED on ${failures} of ${total} runtimes\n`,
  );
  return failures === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    process.stdout.write(`runtimes: FAILED: ${error.message}\n`);
    process.exit(1);
  },
);
