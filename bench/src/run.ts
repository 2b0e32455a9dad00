/**
 * `pnpm bench`: starts the stack on a scratch database and a private Redis, seeds bots and tokens,
 * and loads each hot path with autocannon from this (separate) process, alternating with a bare
 * Express floor in the same run. Prints a table and writes bench/results/<date>.json.
 */
import { randomBytes } from "node:crypto";
import { Agent, request as httpRequest } from "node:http";
import path from "node:path";
import { createSecretBox, hashToken, migrate } from "@botdir/db";
import { parseMetrics } from "@botdir/db/testing";
import pg from "pg";
import { type LoadResult, load } from "./load.js";
import {
  hostile,
  type PipelineContext,
  percentile,
  seedDeliveryHistory,
  seedPipelineBots,
  webhookMix,
} from "./pipeline.js";
import {
  appNodeArgs,
  appNodeVersion,
  cpuSeconds,
  cpuSecondsOf,
  freePort,
  type Proc,
  ROOT,
  rssMb,
  startNode,
  startRedisServer,
  waitForHttp,
} from "./procs.js";
import { startReceiver } from "./receiver.js";
import { saveRun } from "./summary.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const ROUND_S = Number(process.env.BENCH_ROUND_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const BOTS = 2_000;
const WEBHOOK_BOTS = 200;
/** webhook-mix: every voted bot has a webhook. hostile: 10 % hold, 10 % 500, 5 % unresolvable. */
const MIX_BOTS = 2_000;
const HOSTILE_BOTS = 200;
/**
 * Bots with a token that only `POST /stats` uses besides the first BOTS: its limit is 60 per token
 * per minute, and 2,000 tokens × 60 = 120,000 a minute is less than a fast runtime posts in three
 * 5-second rounds (Node 24 reached ≈ 9,600/s: 23,576 answers were 429s). 10,000 tokens give 600,000.
 */
const STATS_EXTRA_BOTS = 8_000;
/** Past votes, each delivered once, of every bot with a webhook (webhook and webhook-mix bots). */
const HISTORY_PER_BOT = 100;
const log = (line: string) => process.stdout.write(`[bench] ${line}\n`);

function withDb(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

const botId = (i: number) => `${100000000000000000n + BigInt(i)}`;
const userId = (i: number) => `${200000000000000000n + BigInt(i)}`;

interface Seeded {
  tokens: string[];
  webhookBots: string[];
  mixBots: string[];
  hostileBots: string[];
  hostileHealthy: Set<string>;
  /** `POST /stats` rotates over these bots and tokens (the first BOTS, then STATS_EXTRA_BOTS more). */
  statsBots: { id: string; token: string }[];
  /** Past votes seeded with a delivered delivery and its attempt (seedDeliveryHistory). */
  history: number;
}

async function seed(
  url: string,
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  encryptionKey: string,
): Promise<Seeded> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  /** `count` approved bots with a fresh token each, ids from botId(firstIndex). */
  async function insertTokenBots(
    firstIndex: number,
    count: number,
  ): Promise<{ id: string; token: string }[]> {
    const bots = Array.from({ length: count }, (_, i) => ({
      id: botId(firstIndex + i),
      token: randomBytes(32).toString("base64url"),
    }));
    await client.query(
      `INSERT INTO bots (id, status, token_hash, approved_at, server_count)
       SELECT id, 'approved', hash, now(), 1 FROM unnest($1::text[], $2::text[]) AS t(id, hash)`,
      [bots.map((b) => b.id), bots.map((b) => hashToken(b.token))],
    );
    return bots;
  }
  const tokenBots = await insertTokenBots(0, BOTS);
  const tokens = tokenBots.map((b) => b.token);
  // One voter with an open window per bot (for /check), 100 log entries per bot (for /votes).
  await client.query(
    `INSERT INTO vote_log (bot_id, user_id, voted_at)
     SELECT b.id, (200000000000000000 + g)::text, now() - (g || ' minutes')::interval
       FROM bots b, generate_series(1, 100) g`,
  );
  await client.query(
    `INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id)
     SELECT bot_id, user_id, voted_at, id FROM vote_log WHERE user_id = '200000000000000001'`,
  );
  const box = createSecretBox(Buffer.from(encryptionKey, "hex"));
  const webhookBots: string[] = [];
  for (let i = 0; i < WEBHOOK_BOTS; i++) {
    const id = botId(BOTS + i);
    webhookBots.push(id);
    await client.query(
      `INSERT INTO bots (id, status, approved_at, webhook_url, webhook_secret_encrypted)
       VALUES ($1, 'approved', now(), $2, $3)`,
      [id, receiver.url("/hook", i), box.encrypt(`whsec_bench_${i}`)],
    );
  }
  const mixBots = Array.from({ length: MIX_BOTS }, (_, i) => botId(BOTS + WEBHOOK_BOTS + i));
  const hostileBots = Array.from({ length: HOSTILE_BOTS }, (_, i) =>
    botId(BOTS + WEBHOOK_BOTS + MIX_BOTS + i),
  );
  // Inserted after the log above was seeded, so these bots have no votes: only /stats uses them.
  const statsBots = [
    ...tokenBots,
    ...(await insertTokenBots(BOTS + WEBHOOK_BOTS + MIX_BOTS + HOSTILE_BOTS, STATS_EXTRA_BOTS)),
  ];
  const { hostileHealthy } = await seedPipelineBots(client, (s) => box.encrypt(s), receiver, {
    mix: mixBots,
    hostile: hostileBots,
  });
  const history = await seedDeliveryHistory(client, [...webhookBots, ...mixBots], HISTORY_PER_BOT);
  // Fresh tables have no planner statistics until autovacuum gets to them; a live database has.
  await client.query("ANALYZE");
  await client.end();
  return { tokens, webhookBots, mixBots, hostileBots, hostileHealthy, statsBots, history };
}

/**
 * Sends `rate` requests per second at an even pace (one every 1000/rate ms) for `durationS` seconds
 * over up to `connections` keep-alive connections. autocannon's overallRate is not a steady rate: each
 * connection sends its share of the second back to back and then idles until the second is over, so
 * "500/s" arrives as bursts at the server's full speed followed by silence.
 */
async function paced(
  url: string,
  rate: number,
  durationS: number,
  connections: number,
  request: () => { path: string; headers?: Record<string, string>; body?: string },
): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const { hostname, port } = new URL(url);
  const inFlight = new Set<Promise<void>>();
  const send = () => {
    const r = request();
    const body = r.body ?? "";
    const done = new Promise<void>((resolve) => {
      const req = httpRequest(
        {
          agent,
          host: hostname,
          port,
          method: "POST",
          path: r.path,
          headers: {
            ...r.headers,
            "content-type": "application/json",
            "content-length": Buffer.byteLength(body),
          },
        },
        (res) => {
          res.resume();
          res.on("end", resolve);
          res.on("error", () => resolve());
        },
      );
      req.on("error", () => resolve());
      req.end(body);
    }).finally(() => inFlight.delete(done));
    inFlight.add(done);
  };
  const total = Math.round(rate * durationS);
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    for (; sent < due; sent++) send();
    await new Promise((r) => setTimeout(r, 1));
  }
  await Promise.all(inFlight);
  agent.destroy();
}

function average(results: LoadResult[]): LoadResult {
  const n = results.length;
  const sum = (k: keyof LoadResult) => results.reduce((a, r) => a + r[k], 0);
  return {
    rps: Math.round(sum("rps") / n),
    p50: Math.round((sum("p50") / n) * 10) / 10,
    p99: Math.round((sum("p99") / n) * 10) / 10,
    non2xx: sum("non2xx"),
    errors: sum("errors"),
    total: sum("total"),
  };
}

async function main(): Promise<void> {
  const startedAt = Date.now();
  const procs: Proc[] = [];
  const redis = await startRedisServer();
  const dbName = `botdir_bench_${Date.now().toString(36)}`;
  const dbUrl = withDb(BASE_DB, dbName);
  const admin = new pg.Client({ connectionString: withDb(BASE_DB, "postgres") });
  await admin.connect();
  const cleanup = async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis.stop();
    // BENCH_KEEP_DB=1 keeps the scratch database for inspection (table statistics, plans).
    if (process.env.BENCH_KEEP_DB === "1") log(`kept database ${dbName}`);
    else await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => {});
    await admin.end();
  };
  try {
    log(`scratch database ${dbName}, private Redis ${redis.url}`);
    await migrate(dbUrl);
    const receiver = await startReceiver();
    const encryptionKey = randomBytes(32).toString("hex");
    const internalKey = randomBytes(24).toString("base64url");
    const seeded = await seed(dbUrl, receiver, encryptionKey);
    log(
      `seeded ${BOTS} bots with tokens, ${BOTS * 100} votes, ${WEBHOOK_BOTS} bots with webhooks, ` +
        `${MIX_BOTS} webhook-mix bots, ${HOSTILE_BOTS} hostile-mix bots, ` +
        `${STATS_EXTRA_BOTS} more bots with tokens for POST /stats, ` +
        `${seeded.history} delivered deliveries of past votes`,
    );

    const [apiPort, ingestPort, dispatcherPort, dispatcher2Port, floorPort, apiMetricsPort] =
      await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort(), freePort()]);
    const common = {
      NODE_ENV: "production",
      // What production runs (infra/base/configmap.yaml): info, one JSON line per request.
      LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "info",
      DATABASE_URL: dbUrl,
      REDIS_URL: redis.url,
      INTERNAL_API_KEY: internalKey,
      SECRET_ENCRYPTION_KEY: encryptionKey,
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    };
    // The apps and the floor run with the production image's Node flags (docker/Dockerfile
    // NODE_OPTIONS, read by appNodeArgs; BENCH_NODE_ARGS replaces them) under APP_NODE (BENCH_NODE).
    // BENCH_PROFILE=api (or vote-ingest, webhook-dispatcher) writes a V8 CPU profile of that app
    // to bench/results/profiles/ when it stops (open it in Chrome DevTools or speedscope).
    const nodeArgs = appNodeArgs();
    const floor = await startNode(
      "floor",
      "bench/src/floor.ts",
      { LOG_LEVEL: common.LOG_LEVEL },
      [String(floorPort)],
      nodeArgs,
    );
    const profileArgs = (name: string) => [
      ...nodeArgs,
      ...(process.env.BENCH_PROFILE === name
        ? ["--cpu-prof", `--cpu-prof-dir=${path.join(ROOT, "bench/results/profiles")}`]
        : []),
    ];
    const api = await startNode(
      "api",
      "apps/api/src/main.ts",
      { ...common, API_PORT: String(apiPort), METRICS_PORT: String(apiMetricsPort) },
      [],
      profileArgs("api"),
    );
    const ingest = await startNode(
      "vote-ingest",
      "apps/vote-ingest/src/main.ts",
      { ...common, INGEST_PORT: String(ingestPort) },
      [],
      profileArgs("vote-ingest"),
    );
    const dispatcher = await startNode(
      "webhook-dispatcher",
      "apps/webhook-dispatcher/src/main.ts",
      { ...common, DISPATCHER_PORT: String(dispatcherPort) },
      [],
      profileArgs("webhook-dispatcher"),
    );
    procs.push(floor, api, ingest, dispatcher);
    await Promise.all([
      waitForHttp(`http://127.0.0.1:${floorPort}/health`),
      waitForHttp(`http://127.0.0.1:${apiPort}/api/health`),
      waitForHttp(`http://127.0.0.1:${ingestPort}/health`),
      waitForHttp(`http://127.0.0.1:${dispatcherPort}/health`),
    ]);

    const dispatcherPids: number[] = [dispatcher.child.pid ?? 0];
    const memory: Record<string, number[]> = { api: [], "vote-ingest": [], "webhook-dispatcher": [] };
    const sampler = setInterval(() => {
      memory.api?.push(rssMb(api.child.pid));
      memory["vote-ingest"]?.push(rssMb(ingest.child.pid));
      for (const pid of dispatcherPids) memory["webhook-dispatcher"]?.push(rssMb(pid));
    }, 1_000);

    let rr = 0;
    const nextBot = () => rr++ % BOTS;
    let statsRr = 0;
    let voter = 1_000_000;
    const commands = JSON.stringify({
      commands: Array.from({ length: 100 }, (_, i) => ({
        name: `command-${i}`,
        description: `Does thing number ${i} for the people of the server`,
        type: 1,
        options: [{ type: 3, name: "target", description: "Who", required: false }],
      })),
    });
    const randomTokens = Array.from({ length: 10_000 }, () => randomBytes(32).toString("base64url"));
    const paths: Record<
      string,
      {
        method: "GET" | "POST" | "PUT";
        ours: string;
        build: () => { path: string; headers?: Record<string, string>; body?: string };
      }
    > = {
      "GET /check": {
        method: "GET",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => {
          const i = nextBot();
          return {
            path: `/api/v1/bots/${botId(i)}/check?userId=${userId(1 + (i % 2))}`,
            headers: { authorization: seeded.tokens[i] as string },
          };
        },
      },
      "POST /stats": {
        method: "POST",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => {
          const bot = seeded.statsBots[statsRr++ % seeded.statsBots.length] as { id: string; token: string };
          return {
            path: `/api/v1/bots/${bot.id}/stats`,
            headers: { authorization: bot.token },
            body: `{"server_count":${1000 + (statsRr % 7)}}`,
          };
        },
      },
      "PUT /commands (100)": {
        method: "PUT",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => {
          const i = nextBot();
          return {
            path: `/api/v1/bots/${botId(i)}/commands`,
            headers: { authorization: seeded.tokens[i] as string },
            body: commands,
          };
        },
      },
      "GET /votes?limit=100": {
        method: "GET",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => {
          const i = nextBot();
          return {
            path: `/api/v1/bots/${botId(i)}/votes?limit=100`,
            headers: { authorization: seeded.tokens[i] as string },
          };
        },
      },
      "POST /internal/v1/votes": {
        method: "POST",
        ours: `http://127.0.0.1:${ingestPort}`,
        build: () => ({
          path: "/internal/v1/votes",
          headers: { authorization: internalKey },
          body: `{"bot_id":"${botId(nextBot())}","user_id":"${3000000000000000000n + BigInt(voter++)}"}`,
        }),
      },
      // Refusals (issue 16): a random token each time (a pool of 10,000, none cached anywhere), and
      // one token far over its /check limit. Both against the floor's /check, like GET /check.
      "401 GET /check (random token)": {
        method: "GET",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => {
          const i = nextBot();
          return {
            path: `/api/v1/bots/${botId(i)}/check?userId=${userId(1)}`,
            headers: { authorization: randomTokens[rr % randomTokens.length] as string },
          };
        },
      },
      "429 GET /check (over its limit)": {
        method: "GET",
        ours: `http://127.0.0.1:${apiPort}`,
        build: () => ({
          path: `/api/v1/bots/${botId(0)}/check?userId=${userId(1)}`,
          headers: { authorization: seeded.tokens[0] as string },
        }),
      },
    };

    /** CPU microseconds per request of each process taking part, measured around our rounds. */
    type CpuShare = { server: number; postgres: number; redis: number; loadGenerator: number };
    const cpuOf = (serverPid: number | undefined) => ({
      server: cpuSeconds(serverPid),
      postgres: cpuSecondsOf("postgres"),
      redis: cpuSeconds(redis.pid()),
      loadGenerator: cpuSeconds(process.pid),
    });
    const perRequest = (before: CpuShare, after: CpuShare, requests: number): CpuShare => {
      const us = (k: keyof CpuShare) => Math.round(((after[k] - before[k]) * 1e6) / Math.max(1, requests));
      return {
        server: us("server"),
        postgres: us("postgres"),
        redis: us("redis"),
        loadGenerator: us("loadGenerator"),
      };
    };
    const cpu: Record<string, { ours: CpuShare; floor: CpuShare }> = {};
    /** The batching counters (botdir_batch_*_total, summed) at an app's /metrics. */
    const batchCounters = async (url: string) => {
      const text = await (await fetch(url)).text();
      const sum = (name: string) =>
        parseMetrics(text)
          .filter((sample) => sample.name === name)
          .reduce((a, sample) => a + sample.value, 0);
      return {
        statements: sum("botdir_batch_statements_total"),
        requests: sum("botdir_batch_requests_total"),
      };
    };
    /** Mean requests per batched statement during our rounds of a path (only batched paths). */
    const batchSize: Record<string, number> = {};
    const table: Record<string, { floor: LoadResult; ours: LoadResult; ratio: number; p99Ratio: number }> =
      {};
    // BENCH_ONLY="check,stats" runs only the paths whose name contains one of the words.
    const only = process.env.BENCH_ONLY?.split(",").map((w) => w.trim().toLowerCase());
    const selected = Object.entries(paths).filter(
      ([name]) => !only || only.some((w) => name.toLowerCase().includes(w)),
    );
    for (const [name, spec] of selected) {
      const ofIngest = spec.ours.endsWith(`:${ingestPort}`);
      const serverPid = ofIngest ? ingest.child.pid : api.child.pid;
      const metricsUrl = ofIngest ? `${spec.ours}/metrics` : `http://127.0.0.1:${apiMetricsPort}/metrics`;
      const batchesBefore = await batchCounters(metricsUrl);
      const floorRuns: LoadResult[] = [];
      const floorCpu: CpuShare[] = [];
      const ourCpu: CpuShare[] = [];
      const ourRuns: LoadResult[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        // BENCH_NO_FLOOR=1 (profiling only) skips the floor rounds; ratios are then meaningless.
        if (process.env.BENCH_NO_FLOOR !== "1") {
          const before = cpuOf(floor.child.pid);
          const r = await load({
            url: `http://127.0.0.1:${floorPort}`,
            method: spec.method,
            durationS: ROUND_S,
            connections: CONNECTIONS,
            request: spec.build,
          });
          floorRuns.push(r);
          floorCpu.push(perRequest(before, cpuOf(floor.child.pid), r.total));
        }

        const before = cpuOf(serverPid);
        const r = await load({
          url: spec.ours,
          method: spec.method,
          durationS: ROUND_S,
          connections: CONNECTIONS,
          request: spec.build,
        });
        ourRuns.push(r);
        ourCpu.push(perRequest(before, cpuOf(serverPid), r.total));
      }
      const f =
        floorRuns.length > 0
          ? average(floorRuns)
          : { rps: 1, p50: 0, p99: 0, non2xx: 0, errors: 0, total: 0 };
      const o = average(ourRuns);
      const meanCpu = (xs: CpuShare[]): CpuShare => {
        const m = (k: keyof CpuShare) =>
          Math.round(xs.reduce((a, x) => a + x[k], 0) / Math.max(1, xs.length));
        return {
          server: m("server"),
          postgres: m("postgres"),
          redis: m("redis"),
          loadGenerator: m("loadGenerator"),
        };
      };
      cpu[name] = { ours: meanCpu(ourCpu), floor: meanCpu(floorCpu) };
      const batchesAfter = await batchCounters(metricsUrl);
      if (batchesAfter.statements > batchesBefore.statements) {
        batchSize[name] =
          Math.round(
            ((batchesAfter.requests - batchesBefore.requests) /
              (batchesAfter.statements - batchesBefore.statements)) *
              10,
          ) / 10;
      }
      table[name] = {
        floor: f,
        ours: o,
        ratio: Math.round((o.rps / f.rps) * 100) / 100,
        p99Ratio: Math.round((o.p99 / Math.max(f.p99, 1)) * 100) / 100,
      };
      log(
        `${name}: ours ${o.rps} req/s (p50 ${o.p50} ms, p99 ${o.p99} ms, non-2xx ${o.non2xx}) vs floor ${f.rps} req/s (p99 ${f.p99} ms) = ${table[name].ratio}×${batchSize[name] ? `, ${batchSize[name]} requests per statement` : ""}`,
      );
    }

    // Every 2xx of the ingest run must be durably recorded.
    const client = new pg.Client({ connectionString: dbUrl });
    client.on("error", () => {}); // the scratch database is dropped at the end, even after a failure
    await client.connect();
    const recorded = Number(
      (await client.query("SELECT count(*) FROM vote_log WHERE user_id >= '3000000000000000000'")).rows[0]
        .count,
    );
    const ingestOk =
      (table["POST /internal/v1/votes"]?.ours.total ?? 0) -
      (table["POST /internal/v1/votes"]?.ours.non2xx ?? 0);

    // The 429 path: one token far over its limit.
    const limited = await load({
      ...(only && !only.includes("429") ? { amount: CONNECTIONS } : {}),
      url: `http://127.0.0.1:${apiPort}`,
      durationS: ROUND_S,
      connections: CONNECTIONS,
      request: () => ({
        path: `/api/v1/bots/${botId(0)}/votes?limit=1`,
        headers: { authorization: seeded.tokens[0] as string },
      }),
    });
    log(
      `429 path: ${limited.rps} req/s, p99 ${limited.p99} ms, non-2xx ${limited.non2xx} of ${limited.total}`,
    );

    // Vote -> webhook. Throughput: votes are cast while no dispatcher runs (the jobs wait in the
    // queue), then N dispatchers start and we time the drain to the local receiver. Latency: one
    // dispatcher, votes cast at a steady 500/s, time from voted_at to receipt.
    const deliveries: Record<string, { votes: number; delivered: number; perSecond: number }> = {};
    let latency = { p50: Number.NaN, p99: Number.NaN, samples: 0 };
    const runWebhook = !only || only.includes("webhook");
    let webhookVoter = 0;
    const voteRequest = () => ({
      path: "/internal/v1/votes",
      headers: { authorization: internalKey },
      body: `{"bot_id":"${seeded.webhookBots[webhookVoter % WEBHOOK_BOTS]}","user_id":"${4000000000000000000n + BigInt(webhookVoter++)}"}`,
    });
    const dispatcherPorts = [dispatcherPort, dispatcher2Port];
    const startDispatchers = async (n: number) => {
      const started: Proc[] = [];
      for (let i = 0; i < n; i++) {
        const port = dispatcherPorts[i] as number;
        const d = await startNode(
          `webhook-dispatcher-${i + 1}`,
          "apps/webhook-dispatcher/src/main.ts",
          { ...common, DISPATCHER_PORT: String(port) },
          [],
          i === 0 ? profileArgs("webhook-dispatcher") : nodeArgs,
        );
        started.push(d);
        procs.push(d);
      }
      await Promise.all(dispatcherPorts.slice(0, n).map((p) => waitForHttp(`http://127.0.0.1:${p}/health`)));
      dispatcherPids.splice(0, dispatcherPids.length, ...started.map((d) => d.child.pid ?? 0));
      return started;
    };
    async function waitDelivered(target: number, timeoutMs: number): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      while (receiver.received() < target && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
    }
    async function throughput(label: string, replicas: number, votes: number) {
      const before = receiver.received();
      await load({
        url: `http://127.0.0.1:${ingestPort}`,
        method: "POST",
        durationS: 120,
        connections: CONNECTIONS,
        request: voteRequest,
        amount: votes,
      });
      receiver.reset();
      const started = await startDispatchers(replicas);
      await waitDelivered(before + votes, 120_000);
      const delivered = receiver.received() - before;
      const { first, last } = receiver.window();
      const seconds = Math.max(0.001, (last - first) / 1000);
      deliveries[label] = { votes, delivered, perSecond: Math.round(delivered / seconds) };
      log(
        `vote → webhook, ${label}: ${delivered}/${votes} delivered, ${deliveries[label].perSecond} deliveries/s (queue drain, first to last receipt)`,
      );
      await Promise.all(started.map((d) => d.stop()));
    }
    if (runWebhook) {
      await dispatcher.stop();
      await throughput("1 dispatcher, pre-filled queue drain", 1, 10_000);
      await throughput("2 dispatchers, pre-filled queue drain", 2, 10_000);
      await startDispatchers(1);
      // Votes at an even 500/s (BENCH_VOTE_PACING=autocannon: autocannon's overallRate, bursts).
      const votesAt500 = (durationS: number) =>
        process.env.BENCH_VOTE_PACING === "autocannon"
          ? load({
              url: `http://127.0.0.1:${ingestPort}`,
              method: "POST",
              durationS,
              connections: CONNECTIONS,
              overallRate: 500,
              request: voteRequest,
            })
          : paced(`http://127.0.0.1:${ingestPort}`, 500, durationS, CONNECTIONS, voteRequest);
      // Two seconds of warm-up at the same rate (JIT, pool and keep-alive connections), not measured:
      // the figure is the steady state of a running dispatcher, not its first seconds.
      const warm = receiver.received();
      await votesAt500(2);
      await waitDelivered(warm + 1_000, 10_000);
      receiver.reset();
      const before = receiver.received();
      await votesAt500(10);
      await waitDelivered(before + 5_000, 10_000);
      latency = {
        p50: percentile(receiver.latencies(), 50),
        p99: percentile(receiver.latencies(), 99),
        samples: receiver.latencies().length,
      };
      log(
        `vote → webhook latency at 500 votes/s, 1 dispatcher: p50 ${latency.p50} ms, p99 ${latency.p99} ms (${latency.samples} deliveries)`,
      );
    }
    // The whole pipeline (pipeline.ts): BENCH_ONLY=mix / hostile selects one.
    const pipelineCtx: PipelineContext = {
      ingestUrl: `http://127.0.0.1:${ingestPort}`,
      floorUrl: `http://127.0.0.1:${floorPort}`,
      internalKey,
      receiver,
      db: client,
      roundS: ROUND_S,
      rounds: ROUNDS,
      connections: CONNECTIONS,
      redisPid: () => redis.pid(),
      ingestPid: () => ingest.child.pid,
      ingestMetricsUrl: `http://127.0.0.1:${ingestPort}/metrics`,
      dispatcherMetricsUrl: `http://127.0.0.1:${dispatcherPorts[0]}/metrics`,
      async stopDispatchers() {
        await Promise.all(procs.filter((p) => p.name.startsWith("webhook-dispatcher")).map((p) => p.stop()));
      },
      async restartDispatcher() {
        await this.stopDispatchers();
        const [d] = await startDispatchers(1);
        return d?.child.pid;
      },
      paced,
      log,
    };
    const selectedScenario = (...names: string[]) => !only || only.some((w) => names.includes(w));
    const mix = selectedScenario("mix", "webhook-mix") ? await webhookMix(pipelineCtx, seeded.mixBots) : null;
    const hostileResult = selectedScenario("hostile")
      ? await hostile(pipelineCtx, seeded.hostileBots, seeded.hostileHealthy, {
          seconds: 10,
          drainVotes: Number(process.env.BENCH_HOSTILE_DRAIN_VOTES ?? 5_000),
        })
      : null;
    await pipelineCtx.stopDispatchers();

    clearInterval(sampler);
    await client.end();
    await receiver.close();

    const mem = Object.fromEntries(
      Object.entries(memory).map(([name, samples]) => [
        name,
        {
          max: Math.max(...samples),
          first: samples[0] ?? 0,
          last: samples.at(-1) ?? 0,
          samples: samples.length,
        },
      ]),
    );
    const report = {
      date: new Date().toISOString(),
      machine: {
        cores: (await import("node:os")).cpus().length,
        node: process.version,
        appNode: appNodeVersion(),
      },
      settings: {
        roundSeconds: ROUND_S,
        rounds: ROUNDS,
        connections: CONNECTIONS,
        logLevel: common.LOG_LEVEL,
        nodeArgs,
      },
      paths: table,
      cpuMicrosecondsPerRequest: cpu,
      requestsPerBatchedStatement: batchSize,
      ingestDurability: { acknowledged: ingestOk, recorded },
      rateLimited: limited,
      webhook: { throughput: deliveries, latencyAt500PerSecond: latency },
      webhookMix: mix,
      hostile: hostileResult,
      memoryMb: mem,
      durationS: Math.round((Date.now() - startedAt) / 1000),
    };
    const dir = path.join(ROOT, "bench/results");
    // A full run joins the day's median file; a subset or shortened run is kept apart.
    const full = !only && ROUND_S === 5 && ROUNDS === 3 && process.env.BENCH_NO_FLOOR !== "1";
    const file = saveRun(dir, report, { full });

    const rows = Object.entries(table).map(
      ([name, r]) =>
        `| ${name} | ${r.ours.rps} | ${r.floor.rps} | ${r.ratio}× | ${r.ours.p50} / ${r.ours.p99} | ${r.floor.p50} / ${r.floor.p99} | ${r.p99Ratio}× |`,
    );
    process.stdout.write(
      [
        "",
        "| path | ours req/s | floor req/s | ratio | ours p50/p99 ms | floor p50/p99 ms | p99 ratio |",
        "|---|---|---|---|---|---|---|",
        ...rows,
        "",
        "CPU µs per request (ours: server / postgres / redis / load generator; floor: server / load generator)",
        ...Object.entries(cpu).map(
          ([name, c]) =>
            `  ${name}: ${c.ours.server} / ${c.ours.postgres} / ${c.ours.redis} / ${c.ours.loadGenerator}; floor ${c.floor.server} / ${c.floor.loadGenerator}`,
        ),
        "",
        `ingest durability: ${recorded} recorded of ${ingestOk} acknowledged`,
        `vote → webhook: ${Object.entries(deliveries)
          .map(([k, v]) => `${k} ${v.perSecond}/s`)
          .join(", ")}; latency at 500/s p50 ${latency.p50} ms, p99 ${latency.p99} ms`,
        mix
          ? `webhook-mix: ingest ${mix.ratio}× of the floor (target ≥ 0.3×), ${mix.delivered}/${mix.recorded} recorded votes delivered, ${mix.deliveriesPerSecondWhileCasting} deliveries/s while casting; with no dispatcher running ${mix.ingestAlone.ratio}×`
          : "webhook-mix: not run",
        hostileResult
          ? `hostile: healthy p99 ${hostileResult.healthyLatencyMs.p99} ms at 500 votes/s (target < 250 ms), drain ${hostileResult.drain.perSecond} healthy deliveries/s (target ≥ 1,000)`
          : "hostile: not run",
        `memory (max RSS MB): ${Object.entries(mem)
          .map(([k, v]) => `${k} ${v.max} (first ${v.first}, last ${v.last})`)
          .join(", ")}`,
        `results: ${path.relative(ROOT, file)} (${report.durationS} s)`,
        "",
      ].join("\n"),
    );
  } finally {
    await cleanup();
  }
}

try {
  await main();
} catch (error) {
  process.stderr.write(`[bench] failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
}
