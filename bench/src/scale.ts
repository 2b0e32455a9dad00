/**
 * `BENCH_SCALE=1 pnpm bench`: does any endpoint's cost grow with the data? Seeds two scratch
 * databases of the same shape, a small one (10 k votes) and a large one (10 M votes: one bot with
 * 5.5 M in the last 30 days, 2,000 others sharing 4.5 M over 400 days; their windows; 1 M
 * deliveries with 1.4 M attempts), with generate_series, and runs the API and vote-ingest on each.
 * Every path is loaded in alternating rounds (small, large, small, large …) in the same run, so
 * the figure that counts is the ratio large/small. Then: widget cache misses one at a time, a
 * stampede of 100 concurrent misses for the hot bot (count queries read from PostgreSQL's index
 * statistics), the hot bot's vote log paged by cursor at its start, middle and end (one request at
 * a time), and the first retention run over the large database while votes are being cast.
 *
 * BENCH_SCALE_VOTES (default 10,000,000), BENCH_ROUND_S (5), BENCH_ROUNDS (2), BENCH_ONLY as in
 * run.ts. Writes bench/results/scale-<date>.json.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createSecretBox, hashToken, migrate } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import pg from "pg";
import { average, jsonPoster, type LoadResult, load } from "./load.js";
import {
  appEnv,
  appNodeArgs,
  freePort,
  type Proc,
  ROOT,
  redisCommand,
  startNode,
  startRedisServer,
  waitForHttp,
} from "./procs.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
const ROUND_S = Number(process.env.BENCH_ROUND_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const LARGE = Number(process.env.BENCH_SCALE_VOTES ?? 10_000_000);
const SMALL = 10_000;
const OTHER_BOTS = 2_000;
const HOT_SHARE = 0.55;
const log = (line: string) => process.stdout.write(`[scale] ${line}\n`);

const botId = (i: number) => `${100000000000000000n + BigInt(i)}`;
const HOT = botId(0);
const CHECK_USER = "200000000000000001";
/** A `since` before every seeded vote. */
const SINCE_ALL = new Date(Date.now() - 401 * 86_400_000).toISOString();
/** The API's widget count statement (apps/api/src/services/bots.ts widgetCounts). */
const WIDGET_SQL = `SELECT b.server_count,
   (SELECT count(*) FROM vote_log l WHERE l.bot_id = b.id AND l.voted_at > $2 AND l.voted_at < $3)
 + (SELECT coalesce(sum(c.votes), 0) FROM vote_counts c WHERE c.bot_id = b.id AND c.hour >= $3) AS votes
  FROM bots b WHERE b.id = $1 AND b.status = 'approved'`;

/** Seeds `votes` votes (55 % for the hot bot in the last 30 days), windows, deliveries and attempts. */
async function seed(
  url: string,
  votes: number,
  encryptionKey: string,
): Promise<{ tokens: string[]; seconds: number }> {
  const started = Date.now();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const tokens = Array.from({ length: OTHER_BOTS + 1 }, () => randomBytes(32).toString("base64url"));
  const box = createSecretBox(Buffer.from(encryptionKey, "hex"));
  await client.query(
    `INSERT INTO bots (id, status, token_hash, approved_at, server_count, webhook_url, webhook_secret_encrypted)
     SELECT id, 'approved', hash, now(), 1, 'http://127.0.0.1:9/hook', $3
       FROM unnest($1::text[], $2::text[]) AS t(id, hash)`,
    [tokens.map((_, i) => botId(i)), tokens.map(hashToken), box.encrypt("whsec_scale")],
  );
  const hot = Math.round(votes * HOT_SHARE);
  const others = votes - hot;
  const deliveries = Math.round(votes / 10);
  // Bulk load: foreign-key and counter triggers off on this connection (the counters are built below
  // from the log, as the migration's backfill does). Other bots' votes first: ids 1..others.
  await client.query("SET session_replication_role = replica");
  await client.query("SET work_mem = '256MB'");
  await client.query(
    `INSERT INTO vote_log (bot_id, user_id, voted_at)
     SELECT (100000000000000001 + g % $2)::text, (200000000000000000 + (g / $2) % 1000)::text,
            now() - random() * interval '400 days'
       FROM generate_series(1, $1::bigint) g`,
    [others, OTHER_BOTS],
  );
  await client.query(
    `INSERT INTO vote_log (bot_id, user_id, voted_at)
     SELECT $2, (200000000000000000 + g % 100000)::text, now() - random() * interval '29 days 12 hours'
       FROM generate_series(1, $1::bigint) g`,
    [hot, HOT],
  );
  await client.query(
    `INSERT INTO vote_counts (bot_id, hour, shard, votes)
     SELECT bot_id, date_trunc('hour', voted_at, 'UTC'), 0, count(*) FROM vote_log GROUP BY 1, 2`,
  );
  await client.query(
    `INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id)
     SELECT DISTINCT ON (bot_id, user_id) bot_id, user_id, voted_at, id
       FROM vote_log ORDER BY bot_id, user_id, voted_at DESC`,
  );
  // An open window of one user per bot, for /check.
  await client.query(
    `INSERT INTO vote_windows (bot_id, user_id, voted_at, vote_id)
     SELECT id, $1, now() - interval '1 hour', 0 FROM bots
     ON CONFLICT (bot_id, user_id) DO UPDATE SET voted_at = EXCLUDED.voted_at`,
    [CHECK_USER],
  );
  // Deliveries of the oldest `deliveries` votes of the other bots: 90 % delivered (one attempt),
  // 10 % failed (five attempts); most completed more than 30 days ago (retention prunes them).
  await client.query(
    `INSERT INTO webhook_deliveries
            (id, bot_id, vote_id, state, attempts_made, next_attempt_at, created_at, updated_at, completed_at)
     SELECT gen_random_uuid(), bot_id, id,
            (CASE WHEN id % 10 = 0 THEN 'failed' ELSE 'delivered' END)::delivery_state,
            CASE WHEN id % 10 = 0 THEN 5 ELSE 1 END,
            voted_at, voted_at, voted_at + interval '1 second', voted_at + interval '1 second'
       FROM vote_log WHERE id <= $1`,
    [deliveries],
  );
  await client.query(
    `INSERT INTO webhook_attempts (delivery_id, bot_id, series, attempt_number, status_code, duration_ms, attempted_at)
     SELECT d.id, d.bot_id, 0, n, CASE WHEN d.state = 'delivered' THEN 204 ELSE 500 END, 5,
            d.created_at + n * interval '1 millisecond'
       FROM webhook_deliveries d, generate_series(1, d.attempts_made) n`,
  );
  await client.query("RESET session_replication_role");
  // What autovacuum would have done on a live database: statistics and the visibility map.
  await client.query("VACUUM ANALYZE");
  await client.end();
  return { tokens, seconds: Math.round((Date.now() - started) / 100) / 10 };
}

/** A counter of pg_stat_user_indexes for `index`, once idle backends have flushed their statistics. */
async function indexStat(
  client: pg.Client,
  index: string,
  column: "idx_scan" | "idx_tup_read",
): Promise<number> {
  // An idle backend flushes its statistics within PGSTAT_IDLE_INTERVAL (10 s).
  await new Promise((r) => setTimeout(r, 11_000));
  await client.query("SELECT pg_stat_clear_snapshot()");
  const { rows } = await client.query<{ n: string }>(
    `SELECT ${column} AS n FROM pg_stat_user_indexes WHERE indexrelname = $1`,
    [index],
  );
  return Number(rows[0]?.n ?? 0);
}

/** Votes at an even `rate` per second until `until()` (checked every second); latencies in ms. */
async function pacedVotes(
  url: string,
  rate: number,
  until: () => boolean,
  build: () => string,
  internalKey: string,
): Promise<number[]> {
  const poster = jsonPoster(url, 64);
  const latencies: number[] = [];
  const send = () => {
    void poster.post("/internal/v1/votes", { authorization: internalKey }, build()).then((ms) => {
      if (ms !== null) latencies.push(ms);
    });
  };
  const start = performance.now();
  let sent = 0;
  while (!until()) {
    const second = performance.now();
    while (performance.now() - second < 1000) {
      const due = Math.floor(((performance.now() - start) * rate) / 1000);
      for (; sent < due; sent++) send();
      await new Promise((r) => setTimeout(r, 2));
    }
  }
  await poster.drain();
  return latencies;
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return (
    Math.round((sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0) * 100) / 100
  );
}

interface Stack {
  name: "small" | "large";
  dbUrl: string;
  dbName: string;
  api: string;
  ingest: string;
  tokens: string[];
  redisUrl: string;
  seedSeconds: number;
}

async function main(): Promise<void> {
  const startedAt = Date.now();
  const procs: Proc[] = [];
  const redises: Awaited<ReturnType<typeof startRedisServer>>[] = [];
  const admin = new pg.Client({ connectionString: withDatabase(BASE_DB, "postgres") });
  await admin.connect();
  const dbNames: string[] = [];
  const cleanup = async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await Promise.all(redises.map((r) => r.stop()));
    for (const name of dbNames)
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => {});
    await admin.end();
  };
  try {
    const encryptionKey = randomBytes(32).toString("hex");
    const internalKey = randomBytes(24).toString("base64url");
    const nodeArgs = appNodeArgs();
    const stacks: Stack[] = [];
    for (const [name, votes] of [
      ["small", SMALL],
      ["large", LARGE],
    ] as const) {
      const dbName = `botdir_scale_${name}_${Date.now().toString(36)}`;
      dbNames.push(dbName);
      const dbUrl = withDatabase(BASE_DB, dbName);
      await migrate(dbUrl);
      log(`${name}: seeding ${votes.toLocaleString("en")} votes into ${dbName} …`);
      const seeded = await seed(dbUrl, votes, encryptionKey);
      log(`${name}: seeded in ${seeded.seconds} s`);
      const redis = await startRedisServer();
      redises.push(redis);
      const [apiPort, metricsPort, ingestPort] = await Promise.all([freePort(), freePort(), freePort()]);
      const common = appEnv({ dbUrl, redisUrl: redis.url, internalKey, encryptionKey }, "warn");
      procs.push(
        await startNode(
          `api-${name}`,
          "apps/api/src/main.ts",
          { ...common, API_PORT: String(apiPort), METRICS_PORT: String(metricsPort) },
          [],
          nodeArgs,
        ),
        await startNode(
          `ingest-${name}`,
          "apps/vote-ingest/src/main.ts",
          { ...common, INGEST_PORT: String(ingestPort) },
          [],
          nodeArgs,
        ),
      );
      await waitForHttp(`http://127.0.0.1:${apiPort}/api/health`);
      await waitForHttp(`http://127.0.0.1:${ingestPort}/health`);
      stacks.push({
        name,
        dbUrl,
        dbName,
        api: `http://127.0.0.1:${apiPort}`,
        ingest: `http://127.0.0.1:${ingestPort}`,
        tokens: seeded.tokens,
        redisUrl: redis.url,
        seedSeconds: seeded.seconds,
      });
    }
    const [small, large] = stacks as [Stack, Stack];

    // Round robin over all bots; /votes and vote casting send every other request to the hot bot.
    let rr = 0;
    let voter = 0;
    const any = () => rr++ % (OTHER_BOTS + 1);
    const hotOrAny = () => (rr++ % 2 === 0 ? 0 : 1 + (rr % OTHER_BOTS));
    const commands = JSON.stringify({
      commands: Array.from({ length: 10 }, (_, i) => ({
        name: `command-${i}`,
        description: `Does thing ${i}`,
      })),
    });
    type Method = "GET" | "POST" | "PUT";
    type Build = (s: Stack) => () => { path: string; headers?: Record<string, string>; body?: string };
    /** The next bot in turn (`any`) asks `/api/v1/bots/<its id><rest>` with its own token. */
    const ownBot = (method: Method, rest: string, body?: () => string) => ({
      method,
      base: "api" as const,
      build: (s: Stack) => () => {
        const i = any();
        return {
          path: `/api/v1/bots/${botId(i)}${rest}`,
          headers: { authorization: s.tokens[i]! },
          ...(body ? { body: body() } : {}),
        };
      },
    });
    const paths: Record<string, { method: Method; base: "api" | "ingest"; build: Build }> = {
      "GET /check": ownBot("GET", `/check?userId=${CHECK_USER}`),
      "POST /stats": ownBot("POST", "/stats", () => `{"server_count":${1000 + (rr % 7)}}`),
      "PUT /commands (10)": ownBot("PUT", "/commands", () => commands),
      // Round robin (60 per token per minute). limit=2: in the small data set the other bots have 2
      // or 3 votes each, so both data sets answer the same rows; the hot bot's limit=100 is timed
      // one request at a time below.
      "GET /votes?limit=2 (round robin)": ownBot("GET", "/votes?limit=2"),
      // Catching up by cursor: the first page of two after a `since` 400 days back (both data sets
      // answer two rows per bot, as above).
      "GET /votes?since=&limit=2 (round robin)": ownBot("GET", `/votes?since=${SINCE_ALL}&limit=2`),
      "GET /widget (cache hit)": {
        method: "GET",
        base: "api",
        build: () => () => ({ path: `/widget/${botId(any())}.svg` }),
      },
      "POST /internal/v1/votes": {
        method: "POST",
        base: "ingest",
        build: () => () => ({
          path: "/internal/v1/votes",
          headers: { authorization: internalKey },
          body: `{"bot_id":"${botId(hotOrAny())}","user_id":"${3000000000000000000n + BigInt(voter++)}"}`,
        }),
      },
    };
    // Fill the widget caches once, so the hit path measures hits.
    for (const s of stacks) {
      for (let i = 0; i <= OTHER_BOTS; i++)
        await fetch(`${s.api}/widget/${botId(i)}.svg`).then((r) => r.text());
    }

    const only = process.env.BENCH_ONLY?.split(",").map((w) => w.trim().toLowerCase());
    const want = (name: string) => !only || only.some((w) => name.toLowerCase().includes(w));
    const table: Record<string, { small: LoadResult; large: LoadResult; ratio: number }> = {};
    for (const [name, spec] of Object.entries(paths)) {
      if (!want(name)) continue;
      const runs: Record<"small" | "large", LoadResult[]> = { small: [], large: [] };
      for (let round = 0; round < ROUNDS; round++) {
        for (const s of round % 2 === 0 ? [small, large] : [large, small]) {
          runs[s.name].push(
            await load({
              url: spec.base === "api" ? s.api : s.ingest,
              method: spec.method,
              durationS: ROUND_S,
              connections: CONNECTIONS,
              request: spec.build(s),
            }),
          );
        }
      }
      const row = { small: average(runs.small), large: average(runs.large), ratio: 0 };
      row.ratio = Math.round((row.large.rps / Math.max(1, row.small.rps)) * 100) / 100;
      table[name] = row;
      log(
        `${name}: small ${row.small.rps}/s p99 ${row.small.p99} ms, large ${row.large.rps}/s p99 ${row.large.p99} ms → ${row.ratio}×` +
          (row.small.non2xx + row.large.non2xx + row.small.errors + row.large.errors > 0
            ? ` (non-2xx ${row.small.non2xx}/${row.large.non2xx}, errors ${row.small.errors}/${row.large.errors})`
            : ""),
      );
    }

    // Widget cache misses of the hot bot, one at a time: drop the cached counts, ask for the badge.
    const misses: Record<
      string,
      { p50: number; p99: number; perSecond: number; sqlP50: number; sqlP99: number }
    > = {};
    if (want("widget miss")) {
      for (const s of stacks) {
        const latencies: number[] = [];
        const key = `botdir:widget:bot:${HOT}`;
        for (let i = 0; i < 300; i++) {
          await redisCommand(s.redisUrl, "DEL", key);
          const t0 = performance.now();
          const res = await fetch(`${s.api}/widget/${HOT}.svg`);
          await res.text();
          if (i >= 20) latencies.push(performance.now() - t0); // after warm-up
        }
        const avg = latencies.reduce((a, b) => a + b, 0) / latencies.length;
        // The count statement alone, as the API sends it (prepared), without HTTP and Node.
        const client = new pg.Client({ connectionString: s.dbUrl });
        await client.connect();
        const sql: number[] = [];
        for (let i = 0; i < 220; i++) {
          const since = Date.now() - 30 * 86_400_000;
          const t0 = performance.now();
          await client.query({
            name: "widget",
            text: WIDGET_SQL,
            values: [HOT, new Date(since), new Date(Math.floor(since / 3_600_000) * 3_600_000 + 3_600_000)],
          });
          if (i >= 20) sql.push(performance.now() - t0);
        }
        await client.end();
        misses[s.name] = {
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
          perSecond: Math.round(1000 / avg),
          sqlP50: percentile(sql, 50),
          sqlP99: percentile(sql, 99),
        };
      }
      log(
        `widget cache miss (hot bot): small p50 ${misses.small?.p50} ms, large p50 ${misses.large?.p50} ms p99 ${misses.large?.p99} ms → ${Math.round(((misses.large?.perSecond ?? 0) / Math.max(1, misses.small?.perSecond ?? 1)) * 100) / 100}×; count SQL p50 ${misses.small?.sqlP50} / ${misses.large?.sqlP50} ms (p99 ${misses.large?.sqlP99})`,
      );
    }

    // One request of the hot bot's, timed; over its 60 per minute it waits out Retry-After first.
    const hotGet = async (s: Stack, pathAndQuery: string): Promise<{ text: string; ms: number }> => {
      for (;;) {
        const t0 = performance.now();
        const res = await fetch(`${s.api}${pathAndQuery}`, { headers: { authorization: s.tokens[0]! } });
        const text = await res.text();
        const ms = performance.now() - t0;
        if (res.status === 200) return { text, ms };
        if (res.status !== 429) throw new Error(`${pathAndQuery}: ${res.status} ${text}`);
        await new Promise((r) => setTimeout(r, Number(res.headers.get("retry-after") ?? 1) * 1000));
      }
    };

    // The hot bot's newest 100 votes, one request at a time.
    const hotVotes: Record<string, { p50: number; p99: number }> = {};
    if (want("votes")) {
      for (const s of stacks) {
        const votes: number[] = [];
        for (let i = 0; i < 50; i++) {
          const res = await hotGet(s, `/api/v1/bots/${HOT}/votes?limit=100`);
          if (i >= 5) votes.push(res.ms);
        }
        hotVotes[s.name] = { p50: percentile(votes, 50), p99: percentile(votes, 99) };
      }
      log(
        `hot bot GET /votes?limit=100 one at a time: small p50 ${hotVotes.small?.p50} ms, large p50 ${hotVotes.large?.p50} ms (p99 ${hotVotes.small?.p99} / ${hotVotes.large?.p99})`,
      );
    }

    // The hot bot's log paged by cursor, one request at a time: a page of 100 after a cursor at the
    // start of its 30 days, in the middle and two days before the end. Each position has at least
    // 100 votes after it in both data sets, so every request answers 100 rows; the cost that counts
    // is large / small at the same position, and start / end within the large one (5.5 M votes).
    // Besides the time, the index entries each page read (idx_tup_read of the log's index, from
    // PostgreSQL's statistics): the cost that does not move with the machine's load.
    const cursorPages: Record<
      string,
      Record<string, { p50: number; p99: number; indexTuplesPerPage: number }>
    > = {};
    if (want("cursor")) {
      const positions = { start: 30, middle: 15, end: 2 } as const;
      const PAGES = 20;
      for (const s of stacks) {
        cursorPages[s.name] = {};
        const client = new pg.Client({ connectionString: s.dbUrl });
        await client.connect();
        for (const [position, daysAgo] of Object.entries(positions)) {
          const since = new Date(Date.now() - daysAgo * 86_400_000).toISOString();
          const first = await hotGet(s, `/api/v1/bots/${HOT}/votes?since=${since}&limit=100`);
          const cursor = (JSON.parse(first.text) as { nextCursor?: string }).nextCursor;
          if (cursor === undefined) throw new Error(`no cursor at the ${position} of the ${s.name} log`);
          const before = await indexStat(client, "vote_log_bot_newest_cover_idx", "idx_tup_read");
          const latencies: number[] = [];
          for (let i = 0; i < PAGES; i++) {
            latencies.push((await hotGet(s, `/api/v1/bots/${HOT}/votes?cursor=${cursor}&limit=100`)).ms);
          }
          const read = (await indexStat(client, "vote_log_bot_newest_cover_idx", "idx_tup_read")) - before;
          cursorPages[s.name]![position] = {
            p50: percentile(latencies.slice(5), 50),
            p99: percentile(latencies.slice(5), 99),
            indexTuplesPerPage: Math.round((read / PAGES) * 10) / 10,
          };
        }
        await client.end();
      }
      const line = (name: string) =>
        Object.values(cursorPages[name] ?? {})
          .map((r) => `${r.p50} ms/${r.indexTuplesPerPage} entries`)
          .join(", ");
      log(
        `hot bot cursor page of 100 (start, middle, end of the log): small ${line("small")}; large ${line("large")}`,
      );
    }

    // Stampede: 100 concurrent misses for the hot bot; count queries = scans of vote_counts' index.
    const stampede: Record<string, { countQueries: number; p99: number; statuses: number[] }> = {};
    if (want("stampede")) {
      for (const s of stacks) {
        const client = new pg.Client({ connectionString: s.dbUrl });
        await client.connect();
        const scans = () => indexStat(client, "vote_counts_pkey", "idx_scan");
        await redisCommand(s.redisUrl, "DEL", `botdir:widget:bot:${HOT}`);
        const before = await scans();
        const latencies: number[] = [];
        const statuses = await Promise.all(
          Array.from({ length: 100 }, async () => {
            const t0 = performance.now();
            const res = await fetch(`${s.api}/widget/${HOT}.svg`);
            await res.text();
            latencies.push(performance.now() - t0);
            return res.status;
          }),
        );
        stampede[s.name] = {
          countQueries: (await scans()) - before,
          p99: percentile(latencies, 99),
          statuses: [...new Set(statuses)],
        };
        await client.end();
      }
      log(
        `stampede of 100 misses: small ${stampede.small?.countQueries} count quer(ies), large ${stampede.large?.countQueries} (p99 ${stampede.large?.p99} ms, statuses ${stampede.large?.statuses})`,
      );
    }

    // Retention over the large database while votes are cast at an even rate.
    let retention: Record<string, unknown> | undefined;
    if (want("retention")) {
      const rate = Number(process.env.BENCH_SCALE_VOTE_RATE ?? 200);
      const build = () =>
        `{"bot_id":"${botId(hotOrAny())}","user_id":"${3000000000000000000n + BigInt(voter++)}"}`;
      const baseEnd = Date.now() + 15_000;
      const without = await pacedVotes(large.ingest, rate, () => Date.now() > baseEnd, build, internalKey);
      const counts = async () => {
        const c = new pg.Client({ connectionString: large.dbUrl });
        await c.connect();
        const { rows } = await c.query<{ d: string; a: string }>(
          "SELECT (SELECT count(*) FROM webhook_deliveries) AS d, (SELECT count(*) FROM webhook_attempts) AS a",
        );
        await c.end();
        return { deliveries: Number(rows[0]?.d), attempts: Number(rows[0]?.a) };
      };
      const tablesBefore = await counts();
      let done = false;
      const t0 = Date.now();
      const run = startNode(
        "retention",
        "apps/webhook-dispatcher/src/retention-cli.ts",
        {
          NODE_ENV: "production",
          LOG_LEVEL: "warn",
          DATABASE_URL: large.dbUrl,
          REDIS_URL: large.redisUrl,
          SECRET_ENCRYPTION_KEY: encryptionKey,
        },
        [],
      ).then(
        (proc) =>
          new Promise<number>((resolve) => {
            let out = "";
            proc.child.stdout?.on("data", (c: Buffer) => {
              out += c.toString();
            });
            proc.child.once("exit", () => {
              done = true;
              resolve(Date.now() - t0);
              log(`retention: ${out.trim()}`);
            });
          }),
      );
      const during = await pacedVotes(large.ingest, rate, () => done, build, internalKey);
      const durationMs = await run;
      const tablesAfter = await counts();
      retention = {
        voteRate: rate,
        durationS: Math.round(durationMs / 100) / 10,
        before: tablesBefore,
        after: tablesAfter,
        voteP99WithoutMs: percentile(without, 99),
        voteP99DuringMs: percentile(during, 99),
        voteP50WithoutMs: percentile(without, 50),
        voteP50DuringMs: percentile(during, 50),
        p99Ratio: Math.round((percentile(during, 99) / Math.max(0.01, percentile(without, 99))) * 100) / 100,
      };
      log(
        `retention over ${tablesBefore.deliveries.toLocaleString("en")} deliveries: ${retention.durationS} s, left ${tablesAfter.deliveries.toLocaleString("en")}; vote p99 ${retention.voteP99WithoutMs} ms without, ${retention.voteP99DuringMs} ms during → ${retention.p99Ratio}×`,
      );
    }

    // Growth per table (bytes, with indexes) of the large database, per million votes.
    const sizes = new pg.Client({ connectionString: large.dbUrl });
    await sizes.connect();
    const { rows: sizeRows } = await sizes.query<{ table: string; rows: string; bytes: string }>(
      `SELECT c.relname AS table, c.reltuples::bigint AS rows, pg_total_relation_size(c.oid) AS bytes
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname NOT LIKE '\\_%' ORDER BY bytes DESC`,
    );
    await sizes.end();
    const growth = Object.fromEntries(
      sizeRows.map((r) => [
        r.table,
        {
          rows: Number(r.rows),
          mb: Math.round(Number(r.bytes) / 1e5) / 10,
          mbPerMillionVotes: Math.round((Number(r.bytes) / 1e6 / (LARGE / 1e6)) * 10) / 10,
        },
      ]),
    );

    const report = {
      date: new Date().toISOString(),
      votes: { small: SMALL, large: LARGE },
      seedSeconds: { small: small.seedSeconds, large: large.seedSeconds },
      roundS: ROUND_S,
      rounds: ROUNDS,
      connections: CONNECTIONS,
      table,
      widgetMiss: misses,
      hotVotes,
      cursorPages,
      stampede,
      retention,
      growth,
      durationS: Math.round((Date.now() - startedAt) / 1000),
    };
    const dir = path.join(ROOT, "bench/results");
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `scale-${report.date.slice(0, 10)}.json`);
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    log(
      `growth (MB per million votes): ${Object.entries(growth)
        .map(([t, g]) => `${t} ${g.mbPerMillionVotes}`)
        .join(", ")}`,
    );
    log(`results: ${path.relative(ROOT, file)} (${report.durationS} s)`);
  } finally {
    await cleanup();
  }
}

try {
  await main();
} catch (error) {
  process.stderr.write(`[scale] failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
}
