/**
 * Instructions per request, counted by valgrind's callgrind: what tracing adds to `GET /check`, to
 * casting a vote and to delivering one (the dispatcher), in a measure that does not move with the host (`pnpm --filter @botdir/bench
 * instructions`; docs/performance.md "What tracing costs"). CPU time per request on this shared
 * host moves ±10 % from round to round between two processes of one build; an instruction count of
 * the same requests on the same build repeats within 1–3 % for the API and the cast and ≈ 5 % for
 * the dispatcher (V8 tiers each process a little differently), so compare medians of several
 * processes (INSTR_ROUNDS).
 *
 * For each variant (tracing off; exporting with the sampler at 0, 0.001, 0.1 and always_on), an API
 * (or a vote-ingest) bundle is started under `valgrind --tool=callgrind` with instrumentation off,
 * warmed with INSTR_WARM requests (so V8 has optimised the path, as in production), then counts
 * INSTR_N requests (`callgrind_control -i on`, then `-d`): every instruction of the process, its
 * threads (GC, the JIT) included. The `deliver` path runs a webhook-dispatcher under callgrind instead:
 * votes for 200 bots with webhooks on bench/src/receiver.ts are cast through a vote-ingest that runs
 * at full speed (tracing at 0.1, so a tenth of the jobs carry a sampled parent, as in production),
 * and the counted unit is a vote the receiver got (INSTR_DELIVER_WARM, then INSTR_DELIVER_N), one
 * delivery at a time (DISPATCHER_CONCURRENCY=1 unless set: at the default 8 the claims and records
 * batch as the queue's pace allows, and tracing off moved ≈ 20 % between processes, ≈ 5 % at 1). The
 * exports go to bench/src/otlp-sink.ts; under valgrind a second
 * is ≈ 50–100 × fewer requests than at full speed, so each variant is counted twice: with exports
 * once a second (OTEL_BSP_SCHEDULE_DELAY=1000, as production) and once every 10 minutes (none in
 * the window but those the buffer's size triggers), and the report gives both and the instructions
 * of one timed export.
 *
 * Env: BENCH_NODE (the apps' Node, as `pnpm bench`), INSTR_N (4,000), INSTR_WARM (6,000),
 * INSTR_DELIVER_N (3,000), INSTR_DELIVER_WARM (4,000), INSTR_C (connections, 8), INSTR_ROUNDS (1),
 * INSTR_ONLY (comma-separated variant names), INSTR_PATHS (`check,cast,deliver`), INSTR_KEEP (a folder: the callgrind files kept there, and each counted process's standard output as `<file>.stdout`, e.g. for `--trace-deopt`), INSTR_NODE_ARGS (more Node
 * flags, e.g. --perf-basic-prof to name JIT code), INSTR_VALGRIND_ARGS (e.g. `--cache-sim=yes --branch-sim=yes`),
 * INSTR_IDLE_S (after each counted window, count that many seconds of the process idle: its timers' own
 * instructions per second; each window's length is printed).
 * The processes counted run with their young generation pinned (countedNodeArgs).
 */
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createSecretBox, migrate } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import pg from "pg";
import { load } from "./load.js";
import { startOtlpSink } from "./otlp-sink.js";
import { insertTokenBots, MIX_PATH, seedDeliveryHistory, seedPipelineBots, sleep } from "./pipeline.js";
import {
  APP_NODE,
  appEntry,
  appEnv,
  appNodeArgs,
  appNodeVersion,
  freePort,
  type Proc,
  ROOT,
  startNode,
  startRedisServer,
  waitForHttp,
} from "./procs.js";
import { type Receiver, startReceiver } from "./receiver.js";
import { botId, log, userId } from "./stack.js";

const N = Number(process.env.INSTR_N ?? 4_000);
const WARM = Number(process.env.INSTR_WARM ?? 6_000);
const CONNECTIONS = Number(process.env.INSTR_C ?? 8);
const ROUNDS = Number(process.env.INSTR_ROUNDS ?? 1);
const DELIVER_N = Number(process.env.INSTR_DELIVER_N ?? 3_000);
const DELIVER_WARM = Number(process.env.INSTR_DELIVER_WARM ?? 4_000);
/** How long the receiver may wait for a phase's deliveries from a dispatcher under valgrind. */
const DELIVER_DEADLINE_MS = 30 * 60_000;
/** The dispatcher's bots: ids apart from the API's and the cast's. */
const deliverBotId = (i: number) => botId(10_000 + i);
const BOTS = 200;
const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";

/** The instructions a callgrind file counted (its `summary:` line). */
function instructionsIn(file: string): number {
  return Number(/^summary: (\d+)/m.exec(readFileSync(file, "utf8"))?.[1] ?? 0);
}

/**
 * The apps' Node flags (appNodeArgs: the image's NODE_OPTIONS) with the young generation pinned at
 * its maximum (`--min-semi-space-size` = `--max-semi-space-size`), unless INSTR_NODE_ARGS sets a
 * minimum. Under valgrind a process allocates ≈ 100 × slower in wall time, so V8's memory reducer
 * takes it for idle and shrinks the young generation at moments that differ from process to
 * process: one that shrank ran twice the scavenges of one that did not (150 against 70 in one
 * count, --trace-gc) and counted up to 4 % more instructions per `/check` with the same code.
 * Pinned, three processes of tracing off agreed within 1.1 %.
 */
function countedNodeArgs(): string[] {
  const args = appNodeArgs();
  const max = args.map((a) => /^--max-semi-space-size=(\d+)$/.exec(a)?.[1]).find(Boolean);
  const ownMin = process.env.INSTR_NODE_ARGS?.includes("--min-semi-space-size");
  return max && !ownMin ? [...args, `--min-semi-space-size=${max}`] : args;
}

interface Variant {
  name: string;
  env: Record<string, string>;
}

const exporting = (sampler: string, arg: string, delayMs: number, url: string): Record<string, string> => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: url,
  OTEL_TRACES_SAMPLER: sampler,
  OTEL_TRACES_SAMPLER_ARG: arg,
  OTEL_BSP_SCHEDULE_DELAY: String(delayMs),
});

function variants(sinkUrl: string): Variant[] {
  const all: Variant[] = [{ name: "off", env: {} }];
  for (const [name, sampler, arg] of [
    ["ratio 0", "parentbased_traceidratio", "0"],
    ["ratio 0.001", "parentbased_traceidratio", "0.001"],
    ["ratio 0.1", "parentbased_traceidratio", "0.1"],
    ["always_on", "always_on", "1"],
  ] as const) {
    all.push({ name: `${name} (export every 1 s)`, env: exporting(sampler, arg, 1_000, sinkUrl) });
    all.push({ name: `${name} (export every 600 s)`, env: exporting(sampler, arg, 600_000, sinkUrl) });
  }
  const only = process.env.INSTR_ONLY?.split(",").map((s) => s.trim());
  return only ? all.filter((v) => only.some((o) => v.name.startsWith(o))) : all;
}

async function main(): Promise<void> {
  const redis = await startRedisServer();
  const dbName = `botdir_instr_${Date.now().toString(36)}`;
  const dbUrl = withDatabase(BASE_DB, dbName);
  const admin = new pg.Client({ connectionString: withDatabase(BASE_DB, "postgres") });
  await admin.connect();
  const sink = await startOtlpSink();
  // The deliver path's vote-ingest exports elsewhere: the sink counts the dispatcher's exports only.
  const ingestSink = await startOtlpSink();
  let receiver: Receiver | undefined;
  let ingest: Promise<{ proc: Proc; url: string }> | undefined;
  // INSTR_KEEP=<dir> keeps the callgrind files there (callgrind_annotate reads them).
  const outDir = process.env.INSTR_KEEP ?? path.join(tmpdir(), `botdir-instr-${process.pid}`);
  mkdirSync(outDir, { recursive: true });
  try {
    await migrate(dbUrl);
    const client = new pg.Client({ connectionString: dbUrl });
    await client.connect();
    const bots = await insertTokenBots(
      client,
      Array.from({ length: BOTS }, (_, i) => botId(i)),
    );
    await client.query(
      `INSERT INTO vote_log (bot_id, user_id, voted_at)
       SELECT id, '${userId(1)}', now() - interval '1 minute' FROM bots`,
    );
    await client.query(
      `INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id)
       SELECT bot_id, user_id, voted_at, id FROM vote_log`,
    );
    const paths = (process.env.INSTR_PATHS ?? "check,cast,deliver").split(",");
    const encryptionKey = randomBytes(32).toString("hex");
    const deliverBots = Array.from({ length: BOTS }, (_, i) => deliverBotId(i));
    if (paths.includes("deliver")) {
      receiver = await startReceiver();
      const box = createSecretBox(Buffer.from(encryptionKey, "hex"));
      await seedPipelineBots(client, (secret) => box.encrypt(secret), receiver, {
        mix: deliverBots,
        hostile: [],
      });
      await seedDeliveryHistory(client, deliverBots, 100);
    }
    await client.query("ANALYZE");
    await client.end();
    const internalKey = randomBytes(24).toString("base64url");
    const env = {
      ...appEnv({ dbUrl, redisUrl: redis.url, internalKey, encryptionKey }, "info"),
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    };
    const entries = {
      check: appEntry("apps/api/src/main.ts"),
      cast: appEntry("apps/vote-ingest/src/main.ts"),
      deliver: appEntry("apps/webhook-dispatcher/src/main.ts"),
    };
    /** The deliver path's vote-ingest, started at its first use. */
    const startIngest = async () => {
      const port = await freePort();
      const proc = await startNode(
        "vote-ingest",
        entries.cast,
        {
          ...env,
          ...exporting("parentbased_traceidratio", "0.1", 1_000, ingestSink.url),
          INGEST_PORT: String(port),
          METRICS_PORT: String(await freePort()),
        },
        [],
        appNodeArgs(),
      );
      const url = `http://127.0.0.1:${port}`;
      await waitForHttp(`${url}/health`);
      return { proc, url };
    };
    log(
      `callgrind: ${N} requests counted after ${WARM} warm-up ones (deliver: ${DELIVER_N} deliveries after ${DELIVER_WARM}), ${CONNECTIONS} connections, Node ${appNodeVersion()}`,
    );
    let voter = 300000000000000000n;
    let rr = 0;
    const results: Record<
      string,
      { variant: string; round: number; perRequest: number; mainPerRequest: number; exports: number }[]
    > = {};
    for (let round = 0; round < ROUNDS; round++) {
      for (const which of paths) {
        for (const variant of variants(sink.url)) {
          const port = await freePort();
          const metricsPort = await freePort();
          const out = path.join(
            outDir,
            `${which}-${round}-${variant.name.replace(/[^a-z0-9.]+/gi, "_")}.out`,
          );
          // Kept with the callgrind files (INSTR_KEEP): the process's own output (e.g. --trace-deopt).
          const stdout = process.env.INSTR_KEEP ? openSync(`${out}.stdout`, "w") : "ignore";
          const child = spawn(
            "valgrind",
            [
              "--tool=callgrind",
              "--instr-atstart=no",
              "--separate-threads=yes",
              ...(process.env.INSTR_VALGRIND_ARGS?.split(" ").filter(Boolean) ?? []),
              `--callgrind-out-file=${out}`,
              APP_NODE,
              ...countedNodeArgs(),
              ...(process.env.INSTR_NODE_ARGS?.split(" ").filter(Boolean) ?? []),
              path.resolve(ROOT, entries[which as keyof typeof entries]),
            ],
            {
              cwd: ROOT,
              env: {
                ...process.env,
                ...env,
                ...variant.env,
                API_PORT: String(port),
                INGEST_PORT: String(port),
                DISPATCHER_PORT: String(port),
                METRICS_PORT: String(metricsPort),
                // The dispatcher one delivery at a time unless asked otherwise: each claimed and
                // recorded alone, so the count does not follow how the queue's pace batched them.
                ...(which === "deliver"
                  ? { DISPATCHER_CONCURRENCY: process.env.DISPATCHER_CONCURRENCY ?? "1" }
                  : {}),
              },
              stdio: ["ignore", stdout, "pipe"],
            },
          );
          if (typeof stdout === "number") closeSync(stdout);
          const exit = new Promise((resolve) => child.once("exit", resolve));
          const exited = () => child.exitCode !== null || child.signalCode !== null;
          let stderr = "";
          child.stderr?.on("data", (c) => {
            stderr = (stderr + c).slice(-4000);
          });
          try {
            await waitForHttp(
              `http://127.0.0.1:${port}${which === "check" ? "/api/health" : "/health"}`,
              300_000,
            );
            if (which === "deliver") ingest ??= startIngest();
            const url = ingest && which === "deliver" ? (await ingest).url : `http://127.0.0.1:${port}`;
            const method = which === "check" ? ("GET" as const) : ("POST" as const);
            const request =
              which === "check"
                ? () => {
                    const bot = bots[rr++ % BOTS] as { id: string; token: string };
                    return {
                      path: `/api/v1/bots/${bot.id}/check?userId=${userId(1 + (rr % 2))}`,
                      headers: { authorization: bot.token },
                    };
                  }
                : () => ({
                    path: "/internal/v1/votes",
                    headers: { authorization: internalKey },
                    body: `{"bot_id":"${(which === "deliver" ? deliverBotId : botId)(rr++ % BOTS)}","user_id":"${voter++}"}`,
                  });
            const cast = async (amount: number) => {
              // `amount` requests, however long they take under valgrind (the duration is a bound only).
              const result = await load({
                url,
                method,
                durationS: 3_600,
                amount,
                connections: CONNECTIONS,
                timeoutS: 120,
                request,
              });
              const ok = result.total - result.non2xx;
              if (ok !== amount || result.errors > 0)
                throw new Error(
                  `${ok} of ${amount} answered 2xx, ${result.errors} failed (statuses ${JSON.stringify(result.statuses)})`,
                );
            };
            // A request answered, or (deliver) a vote cast and then received by the receiver.
            const received = () => receiver?.received(MIX_PATH) ?? 0;
            const drive = async (amount: number) => {
              const before = received();
              await cast(amount);
              if (which !== "deliver") return;
              const deadline = Date.now() + DELIVER_DEADLINE_MS;
              while (received() < before + amount) {
                if (Date.now() > deadline || exited())
                  throw new Error(`${received() - before} of ${amount} votes delivered`);
                await sleep(100);
              }
            };
            const n = which === "deliver" ? DELIVER_N : N;
            await drive(which === "deliver" ? DELIVER_WARM : WARM);
            const before = sink.received().exports;
            execFileSync("callgrind_control", ["-i", "on", String(child.pid)], { stdio: "ignore" });
            const windowStartedAt = Date.now();
            await drive(n);
            const windowS = (Date.now() - windowStartedAt) / 1000;
            execFileSync("callgrind_control", ["-d", String(child.pid)], { stdio: "ignore" });
            const exports = sink.received().exports - before;
            // One file per thread: -01 is the main thread (the requests' JavaScript, the young
            // generation's collections); the others are V8's (the JIT, concurrent marking) and libuv's.
            const files = readdirSync(outDir).filter((f) => f.startsWith(`${path.basename(out)}.1-`));
            const counts = files.map((f) => ({
              main: f.endsWith("-01"),
              n: instructionsIn(path.join(outDir, f)),
            }));
            const total = counts.reduce((sum, c) => sum + c.n, 0);
            const mainThread = counts.find((c) => c.main)?.n ?? 0;
            const mainFile = files.find((f) => f.endsWith("-01"));
            if (process.env.INSTR_VALGRIND_ARGS && mainFile) {
              // With --cache-sim or --branch-sim: the main thread's events and their totals.
              const text = readFileSync(path.join(outDir, mainFile), "utf8");
              log(
                `${which} ${variant.name}: main thread ${/^events: (.*)$/m.exec(text)?.[1]} = ${/^summary: (.*)$/m.exec(text)?.[1]}`,
              );
            }
            const perRequest = Math.round(total / n);
            const mainPerRequest = Math.round(mainThread / n);
            results[which] = results[which] ?? [];
            results[which].push({
              variant: variant.name,
              round,
              perRequest,
              mainPerRequest,
              exports,
            });
            log(
              `${which} ${variant.name}: ${perRequest} instructions per request, ${mainPerRequest} on the main thread (${exports} exports in the window of ${windowS.toFixed(1)} s; pid ${child.pid})`,
            );
            const idleS = Number(process.env.INSTR_IDLE_S ?? 0);
            if (idleS > 0) {
              await sleep(idleS * 1000);
              execFileSync("callgrind_control", ["-d", String(child.pid)], { stdio: "ignore" });
              // The second dump's main thread (`-01`).
              const idleMain = `${out}.2-01`;
              const idle = existsSync(idleMain) ? instructionsIn(idleMain) : 0;
              log(
                `${which} ${variant.name}: idle for ${idleS} s after the window: ${Math.round(idle / idleS)} main-thread instructions per second`,
              );
            }
          } catch (error) {
            throw new Error(`${which} ${variant.name}: ${(error as Error).message}\n${stderr}`);
          } finally {
            if (exited())
              log(
                `${which} ${variant.name}: the process had exited by itself (${child.exitCode ?? child.signalCode}): ${stderr.slice(-600)}`,
              );
            else child.kill("SIGKILL");
            await exit;
          }
        }
      }
    }
    const report: Record<string, unknown> = {
      when: new Date().toISOString(),
      node: appNodeVersion(),
      n: N,
      warm: WARM,
      deliverN: DELIVER_N,
      deliverWarm: DELIVER_WARM,
    };
    for (const [which, rows] of Object.entries(results)) {
      const median = (name: string, of: "perRequest" | "mainPerRequest") => {
        const values = rows
          .filter((r) => r.variant === name)
          .map((r) => r[of])
          .sort((a, b) => a - b);
        return values[Math.floor(values.length / 2)] as number;
      };
      const names = [...new Set(rows.map((r) => r.variant))];
      const ratio = (name: string, of: "perRequest" | "mainPerRequest") =>
        Number((median(name, of) / median("off", of)).toFixed(3));
      report[which] = Object.fromEntries(
        names.map((name) => [
          name,
          {
            mainThread: median(name, "mainPerRequest"),
            mainThreadRatio: ratio(name, "mainPerRequest"),
            allThreads: median(name, "perRequest"),
            allThreadsRatio: ratio(name, "perRequest"),
          },
        ]),
      );
      for (const name of names)
        log(
          `${which}: ${name} ÷ off = ${ratio(name, "mainPerRequest")} on the main thread, ${ratio(name, "perRequest")} in all threads`,
        );
    }
    const file = path.join(
      ROOT,
      "bench/results/runs/partial",
      `instructions-${new Date().toISOString().replace(/[:.]/g, "-")}.json`,
    );
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, `${JSON.stringify({ ...report, rows: results }, null, 2)}\n`);
    log(`wrote ${path.relative(ROOT, file)}`);
  } finally {
    if (!process.env.INSTR_KEEP) rmSync(outDir, { recursive: true, force: true });
    await (await ingest?.catch(() => undefined))?.proc.stop();
    await receiver?.close();
    await ingestSink.close();
    await sink.close();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => {});
    await admin.end();
    await redis.stop();
  }
}

await main();
process.exit(0);
