/**
 * `pnpm bench`: starts the stack on a scratch database and a private Redis, seeds bots and tokens,
 * and loads each hot path with autocannon from this (separate) process, alternating with a bare
 * Express floor in the same run. Prints a table and writes bench/results/<date>.json.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import path from "node:path";
import { createSecretBox, hashToken, migrate } from "@botdir/db";
import pg from "pg";
import { type LoadResult, load } from "./load.js";
import { freePort, type Proc, ROOT, rssMb, startNode, startRedis, waitForHttp } from "./procs.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const ROUND_S = Number(process.env.BENCH_ROUND_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const BOTS = 2_000;
const WEBHOOK_BOTS = 200;
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
}

async function seed(url: string, receiverUrl: string, encryptionKey: string): Promise<Seeded> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const tokens = Array.from({ length: BOTS }, () => randomBytes(32).toString("base64url"));
  const ids = tokens.map((_, i) => botId(i));
  await client.query(
    `INSERT INTO bots (id, status, token_hash, approved_at, server_count)
     SELECT id, 'approved', hash, now(), 1 FROM unnest($1::text[], $2::text[]) AS t(id, hash)`,
    [ids, tokens.map(hashToken)],
  );
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
      [id, receiverUrl, box.encrypt(`whsec_bench_${i}`)],
    );
  }
  await client.end();
  return { tokens, webhookBots };
}

/** A local webhook receiver: counts deliveries and vote-to-delivery latency. */
async function startReceiver() {
  const latencies: number[] = [];
  const seen = new Set<string>();
  let first = 0;
  let last = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const now = Date.now();
      const id = String(req.headers["x-webhook-delivery"]);
      if (!seen.has(id)) {
        seen.add(id);
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { voted_at: string };
          latencies.push(now - Date.parse(body.voted_at));
        } catch {
          // counted, no latency
        }
        first ||= now;
        last = now;
      }
      res.statusCode = 204;
      res.end();
    });
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received: () => seen.size,
    window: () => ({ first, last }),
    reset() {
      latencies.length = 0;
      first = 0;
      last = 0;
    },
    latencies,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
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
  const redis = await startRedis();
  const dbName = `botdir_bench_${Date.now().toString(36)}`;
  const dbUrl = withDb(BASE_DB, dbName);
  const admin = new pg.Client({ connectionString: withDb(BASE_DB, "postgres") });
  await admin.connect();
  const cleanup = async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis.stop();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => {});
    await admin.end();
  };
  try {
    log(`scratch database ${dbName}, private Redis ${redis.url}`);
    await migrate(dbUrl);
    const receiver = await startReceiver();
    const encryptionKey = randomBytes(32).toString("hex");
    const internalKey = randomBytes(24).toString("base64url");
    const seeded = await seed(dbUrl, receiver.url, encryptionKey);
    log(`seeded ${BOTS} bots with tokens, ${BOTS * 100} votes, ${WEBHOOK_BOTS} bots with webhooks`);

    const [apiPort, ingestPort, dispatcherPort, dispatcher2Port, floorPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    const common = {
      NODE_ENV: "production",
      LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "warn",
      DATABASE_URL: dbUrl,
      REDIS_URL: redis.url,
      INTERNAL_API_KEY: internalKey,
      SECRET_ENCRYPTION_KEY: encryptionKey,
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    };
    const floor = await startNode("floor", "bench/src/floor.ts", {}, [String(floorPort)]);
    const api = await startNode("api", "apps/api/src/main.ts", { ...common, API_PORT: String(apiPort) });
    const ingest = await startNode("vote-ingest", "apps/vote-ingest/src/main.ts", {
      ...common,
      INGEST_PORT: String(ingestPort),
    });
    const dispatcher = await startNode("webhook-dispatcher", "apps/webhook-dispatcher/src/main.ts", {
      ...common,
      DISPATCHER_PORT: String(dispatcherPort),
    });
    procs.push(floor, api, ingest, dispatcher);
    await Promise.all([
      waitForHttp(`http://127.0.0.1:${floorPort}/health`),
      waitForHttp(`http://127.0.0.1:${apiPort}/api/health`),
      waitForHttp(`http://127.0.0.1:${ingestPort}/health`),
      waitForHttp(`http://127.0.0.1:${dispatcherPort}/health`),
    ]);

    const memory: Record<string, number[]> = { api: [], "vote-ingest": [], "webhook-dispatcher": [] };
    const sampler = setInterval(() => {
      memory.api?.push(rssMb(api.child.pid));
      memory["vote-ingest"]?.push(rssMb(ingest.child.pid));
      memory["webhook-dispatcher"]?.push(rssMb(dispatcher.child.pid));
    }, 1_000);

    let rr = 0;
    const nextBot = () => rr++ % BOTS;
    let voter = 1_000_000;
    const commands = JSON.stringify({
      commands: Array.from({ length: 100 }, (_, i) => ({
        name: `command-${i}`,
        description: `Does thing number ${i} for the people of the server`,
        type: 1,
        options: [{ type: 3, name: "target", description: "Who", required: false }],
      })),
    });
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
          const i = nextBot();
          return {
            path: `/api/v1/bots/${botId(i)}/stats`,
            headers: { authorization: seeded.tokens[i] as string },
            body: `{"server_count":${1000 + (rr % 7)}}`,
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
    };

    const table: Record<string, { floor: LoadResult; ours: LoadResult; ratio: number; p99Ratio: number }> =
      {};
    for (const [name, spec] of Object.entries(paths)) {
      const floorRuns: LoadResult[] = [];
      const ourRuns: LoadResult[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        floorRuns.push(
          await load({
            url: `http://127.0.0.1:${floorPort}`,
            method: spec.method,
            durationS: ROUND_S,
            connections: CONNECTIONS,
            request: spec.build,
          }),
        );
        ourRuns.push(
          await load({
            url: spec.ours,
            method: spec.method,
            durationS: ROUND_S,
            connections: CONNECTIONS,
            request: spec.build,
          }),
        );
      }
      const f = average(floorRuns);
      const o = average(ourRuns);
      table[name] = {
        floor: f,
        ours: o,
        ratio: Math.round((o.rps / f.rps) * 100) / 100,
        p99Ratio: Math.round((o.p99 / Math.max(f.p99, 1)) * 100) / 100,
      };
      log(
        `${name}: ours ${o.rps} req/s (p50 ${o.p50} ms, p99 ${o.p99} ms, non-2xx ${o.non2xx}) vs floor ${f.rps} req/s (p99 ${f.p99} ms) = ${table[name].ratio}×`,
      );
    }

    // Every 2xx of the ingest run must be durably recorded.
    const client = new pg.Client({ connectionString: dbUrl });
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

    // Vote -> webhook: throughput with 1 then 2 dispatcher replicas, then latency at 500 votes/s.
    let webhookVoter = 0;
    const castVotes = (amount: number, rate?: number) =>
      load({
        url: `http://127.0.0.1:${ingestPort}`,
        method: "POST",
        durationS: rate ? Math.ceil(amount / rate) : 60,
        connections: CONNECTIONS,
        overallRate: rate,
        request: () => ({
          path: "/internal/v1/votes",
          headers: { authorization: internalKey },
          body: `{"bot_id":"${seeded.webhookBots[webhookVoter % WEBHOOK_BOTS]}","user_id":"${4000000000000000000n + BigInt(webhookVoter++)}"}`,
        }),
      });
    const deliveries: Record<string, { votes: number; delivered: number; perSecond: number }> = {};
    async function throughput(label: string, votes: number) {
      receiver.reset();
      const before = receiver.received();
      const castStart = Date.now();
      await load({
        url: `http://127.0.0.1:${ingestPort}`,
        method: "POST",
        durationS: 120,
        connections: CONNECTIONS,
        request: () => ({
          path: "/internal/v1/votes",
          headers: { authorization: internalKey },
          body: `{"bot_id":"${seeded.webhookBots[webhookVoter % WEBHOOK_BOTS]}","user_id":"${4000000000000000000n + BigInt(webhookVoter++)}"}`,
        }),
        amount: votes,
      });
      const deadline = Date.now() + 60_000;
      while (receiver.received() - before < votes && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      const delivered = receiver.received() - before;
      const { first, last } = receiver.window();
      const seconds = Math.max(0.001, (last - Math.min(first || castStart, castStart)) / 1000);
      deliveries[label] = { votes, delivered, perSecond: Math.round(delivered / seconds) };
      log(
        `vote → webhook, ${label}: ${delivered}/${votes} delivered, ${deliveries[label].perSecond} deliveries/s`,
      );
    }
    await throughput("1 dispatcher", 5_000);
    const dispatcher2 = await startNode("webhook-dispatcher-2", "apps/webhook-dispatcher/src/main.ts", {
      ...common,
      DISPATCHER_PORT: String(dispatcher2Port),
    });
    procs.push(dispatcher2);
    await waitForHttp(`http://127.0.0.1:${dispatcher2Port}/health`);
    await throughput("2 dispatchers", 5_000);

    receiver.reset();
    await castVotes(5_000, 500);
    await new Promise((r) => setTimeout(r, 2_000));
    const latency = {
      p50: percentile(receiver.latencies, 50),
      p99: percentile(receiver.latencies, 99),
      samples: receiver.latencies.length,
    };
    log(
      `vote → webhook latency at 500 votes/s: p50 ${latency.p50} ms, p99 ${latency.p99} ms (${latency.samples} deliveries)`,
    );
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
      machine: { cores: (await import("node:os")).cpus().length, node: process.version },
      settings: {
        roundSeconds: ROUND_S,
        rounds: ROUNDS,
        connections: CONNECTIONS,
        logLevel: common.LOG_LEVEL,
      },
      paths: table,
      ingestDurability: { acknowledged: ingestOk, recorded },
      rateLimited: limited,
      webhook: { throughput: deliveries, latencyAt500PerSecond: latency },
      memoryMb: mem,
      durationS: Math.round((Date.now() - startedAt) / 1000),
    };
    const dir = path.join(ROOT, "bench/results");
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `${report.date.slice(0, 10)}.json`);
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);

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
        `ingest durability: ${recorded} recorded of ${ingestOk} acknowledged`,
        `vote → webhook: ${Object.entries(deliveries)
          .map(([k, v]) => `${k} ${v.perSecond}/s`)
          .join(", ")}; latency at 500/s p50 ${latency.p50} ms, p99 ${latency.p99} ms`,
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

await main();
