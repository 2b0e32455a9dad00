/**
 * The stack `pnpm bench` measures: a scratch PostgreSQL database (migrated, seeded, analysed), a
 * private `redis-server`, the local webhook receiver, the floor, and the three apps under APP_NODE
 * with the production image's Node flags. Every scenario (src/scenarios/) runs against one Stack.
 */
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createSecretBox, migrate } from "@botdir/db";
import { withDatabase } from "@botdir/db/testing";
import pg from "pg";
import { type OtlpSink, startOtlpSink } from "./otlp-sink.js";
import { insertTokenBots, seedDeliveryHistory, seedPipelineBots } from "./pipeline.js";
import {
  APPS_FROM,
  appEntries,
  appEntry,
  appEnv,
  appNodeArgs,
  freePort,
  type Proc,
  ROOT,
  rssMb,
  startNode,
  startRedisServer,
  waitForHttp,
} from "./procs.js";
import { type Receiver, startReceiver } from "./receiver.js";

const BASE_DB = process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
export const BOTS = 2_000;
export const WEBHOOK_BOTS = 200;
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

export const log = (line: string) => process.stdout.write(`[bench] ${line}\n`);
export const botId = (i: number) => `${100000000000000000n + BigInt(i)}`;
export const userId = (i: number) => `${200000000000000000n + BigInt(i)}`;

export interface Seeded {
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

async function seed(url: string, receiver: Receiver, encryptionKey: string): Promise<Seeded> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  /** `count` approved bots with a fresh token each, ids from botId(firstIndex). */
  const insertTokenBotsFrom = (firstIndex: number, count: number) =>
    insertTokenBots(
      client,
      Array.from({ length: count }, (_, i) => botId(firstIndex + i)),
    );
  const tokenBots = await insertTokenBotsFrom(0, BOTS);
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
    ...(await insertTokenBotsFrom(BOTS + WEBHOOK_BOTS + MIX_BOTS + HOSTILE_BOTS, STATS_EXTRA_BOTS)),
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

/** An API and a vote-ingest started together (Stack's `traced`, `untraced`, `base`). */
export interface AppPair {
  apiUrl: string;
  apiMetricsUrl: string;
  apiPid: () => number | undefined;
  ingestUrl: string;
  ingestPid: () => number | undefined;
  /** Stops both and starts them again, on the same ports, answering their health checks. */
  restart(): Promise<void>;
}

export interface Stack {
  dbName: string;
  dbUrl: string;
  /** A connection of the bench's own to the scratch database (counting recorded votes). */
  db: pg.Client;
  redisUrl: string;
  redisPid: () => number | undefined;
  receiver: Receiver;
  seeded: Seeded;
  internalKey: string;
  /** The apps' environment (log level included). */
  env: Record<string, string>;
  /** The apps' and the floor's Node flags (docker/Dockerfile's NODE_OPTIONS, or BENCH_NODE_ARGS). */
  nodeArgs: string[];
  floorUrl: string;
  /** The floor with `/check`'s and `/stats`'s I/O (src/floor.ts, FLOOR_DATABASE_URL). */
  ioFloorUrl: string;
  ioFloorPid: () => number | undefined;
  apiUrl: string;
  apiMetricsUrl: string;
  /** The second API, DB_PREPARED_STATEMENTS=off (every statement unnamed). */
  apiUnnamedUrl: string;
  apiUnnamedMetricsUrl: string;
  apiUnnamedPid: () => number | undefined;
  /**
   * Pairs of an API and a vote-ingest started alike, after the apps above, for the rows comparing
   * two builds or settings of one app (a pair's processes have served nothing else, so neither
   * side carries the other rows' heap): `traced`, tracing on, every span sampled
   * (OTEL_TRACES_SAMPLER=always_on) and exported to `otlp` (src/otlp-sink.ts), and `untraced`, the
   * same build with tracing off (ids made, nothing recorded or exported), for the rows "(tracing on
   * ÷ off)"; with BENCH_BASE_APPS=<dir> (`api/main.js` and `vote-ingest/main.js` in it: bundles of
   * another commit, e.g. the code before a change) `base`, tracing off, for the rows "(this build ÷
   * base)" against `untraced`.
   */
  traced: AppPair;
  /**
   * The same build with tracing on at the sampling production is advised to run
   * (OTEL_TRACES_SAMPLER=parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1), exported to
   * `otlp`, for the rows "(tracing 0.1 ÷ off)".
   */
  sampled: AppPair;
  untraced: AppPair;
  base?: AppPair;
  /** The OTLP receiver of the traced apps (and of a dispatcher given `tracingEnv`). */
  otlp: OtlpSink;
  /** The environment that turns tracing on (100 % sampled, exported to `otlp`). */
  tracingEnv: Record<string, string>;
  /** The environment of `sampled`: a tenth of new traces, parent-based, exported to `otlp`. */
  sampledTracingEnv: Record<string, string>;
  ingestUrl: string;
  floorPid: () => number | undefined;
  apiPid: () => number | undefined;
  ingestPid: () => number | undefined;
  /** Prometheus endpoint of the first dispatcher (whichever is running). */
  dispatcherMetricsUrl: string;
  /**
   * Stops every running dispatcher, then starts `n` (the first with BENCH_PROFILE's flags), from
   * `entry` when given (another build of the dispatcher: the drain scenario compares builds), with
   * `env` added to the apps' environment.
   */
  startDispatchers(n: number, entry?: string, env?: Record<string, string>): Promise<Proc[]>;
  /**
   * Stops every running dispatcher, then starts one per build (at most three), each from its own
   * entry (default: the run's) with its `env` added; the i-th serves `dispatcherMetricsUrls[i]`.
   */
  startDispatcherBuilds(builds: { entry?: string; env?: Record<string, string> }[]): Promise<Proc[]>;
  /** Prometheus endpoints of the dispatchers started side by side (startDispatcherBuilds). */
  dispatcherMetricsUrls: string[];
  stopDispatchers(): Promise<void>;
  /**
   * Starts the dispatcher's floor (src/sender-floor.ts) with the dispatcher's environment, sending
   * round-robin to `targets`; `send(n)` resolves when n deliveries have their outcome. `client`
   * "node": Node's http.request instead of got.
   */
  startSenderFloor(targets: { url: string; botId: string }[], client?: "got" | "node"): Promise<SenderFloor>;
  /** RSS samples (MB) of every app, one a second since the start. */
  memory(): Record<string, { max: number; first: number; last: number; samples: number }>;
  stop(): Promise<void>;
}

export interface SenderFloor {
  pid: number | undefined;
  send(n: number): Promise<{ sent: number; delivered: number }>;
  stop(): Promise<void>;
}

/** Starts everything; `stop()` stops it and drops the scratch database (BENCH_KEEP_DB=1 keeps it). */
export async function startStack(): Promise<Stack> {
  const procs: Proc[] = [];
  const redis = await startRedisServer();
  const dbName = `botdir_bench_${Date.now().toString(36)}`;
  const dbUrl = withDatabase(BASE_DB, dbName);
  const admin = new pg.Client({ connectionString: withDatabase(BASE_DB, "postgres") });
  await admin.connect();
  let receiver: Receiver | undefined;
  let db: pg.Client | undefined;
  let sampler: NodeJS.Timeout | undefined;
  let otlp: OtlpSink | undefined;
  const stop = async () => {
    clearInterval(sampler);
    await Promise.all(procs.map((p) => p.stop()));
    await otlp?.close();
    await db?.end().catch(() => {});
    await receiver?.close();
    await redis.stop();
    // BENCH_KEEP_DB=1 keeps the scratch database for inspection (table statistics, plans).
    if (process.env.BENCH_KEEP_DB === "1") log(`kept database ${dbName}`);
    else await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => {});
    await admin.end();
  };
  try {
    log(`scratch database ${dbName}, private Redis ${redis.url}`);
    await migrate(dbUrl);
    receiver = await startReceiver();
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
    const [apiUnnamedPort, apiUnnamedMetricsPort, ioFloorPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
    ]);
    const env = {
      // What production runs (infra/base/configmap.yaml): info, one JSON line per request.
      ...appEnv({ dbUrl, redisUrl: redis.url, internalKey, encryptionKey }, "info"),
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    };
    // The apps and the floor run with the production image's Node flags (docker/Dockerfile
    // NODE_OPTIONS, read by appNodeArgs; BENCH_NODE_ARGS replaces them) under APP_NODE (BENCH_NODE).
    // BENCH_PROFILE=api (or vote-ingest, webhook-dispatcher, api-traced, vote-ingest-traced, api-untraced, …;
    // several, comma-separated) writes a V8 CPU profile of each app named
    // to bench/results/profiles/ when it stops (open it in Chrome DevTools or speedscope).
    const nodeArgs = appNodeArgs();
    const profileArgs = (name: string) => [
      ...nodeArgs,
      ...(process.env.BENCH_PROFILE?.split(",").includes(name)
        ? ["--cpu-prof", `--cpu-prof-dir=${path.join(ROOT, "bench/results/profiles")}`]
        : []),
    ];
    const [floorEntry, senderFloorEntry] = appEntries("bench/src/floor.ts", "bench/src/sender-floor.ts");
    const entries = {
      floor: floorEntry as string,
      senderFloor: senderFloorEntry as string,
      api: appEntry("apps/api/src/main.ts"),
      ingest: appEntry("apps/vote-ingest/src/main.ts"),
      dispatcher: appEntry("apps/webhook-dispatcher/src/main.ts"),
    };
    log(
      `apps run ${APPS_FROM === "bundle" ? "as bundles (node dist/main.js, like the image)" : "from source (tsx)"}`,
    );
    const floor = await startNode(
      "floor",
      entries.floor,
      { LOG_LEVEL: env.LOG_LEVEL },
      [String(floorPort)],
      nodeArgs,
    );
    const ioFloor = await startNode(
      "floor-io",
      entries.floor,
      { LOG_LEVEL: env.LOG_LEVEL, FLOOR_DATABASE_URL: dbUrl, FLOOR_REDIS_URL: redis.url },
      [String(ioFloorPort)],
      nodeArgs,
    );
    const api = await startNode(
      "api",
      entries.api,
      { ...env, API_PORT: String(apiPort), METRICS_PORT: String(apiMetricsPort) },
      [],
      profileArgs("api"),
    );
    const ingest = await startNode(
      "vote-ingest",
      entries.ingest,
      { ...env, INGEST_PORT: String(ingestPort) },
      [],
      profileArgs("vote-ingest"),
    );
    // The same API with every statement unnamed, as it runs behind a transaction-pooling PgBouncer
    // (DB_PREPARED_STATEMENTS=off): the hot paths' rows "(unnamed statements)" measure what that costs.
    const apiUnnamed = await startNode(
      "api-unnamed",
      entries.api,
      {
        ...env,
        DB_PREPARED_STATEMENTS: "off",
        API_PORT: String(apiUnnamedPort),
        METRICS_PORT: String(apiUnnamedMetricsPort),
      },
      [],
      nodeArgs,
    );
    // The same API and vote-ingest with tracing on (every span sampled and exported): the rows
    // "(tracing on ÷ off)" alternate them with the two above, whose tracing is off.
    otlp = await startOtlpSink();
    // BENCH_OTLP_PROTOCOL (default the apps' own, http/protobuf) and BENCH_OTLP_COMPRESSION (none):
    // the exports' protocol and compression, for the bytes per request they cost.
    const tracingEnv = {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_TRACES_SAMPLER: "always_on",
      OTEL_EXPORTER_OTLP_PROTOCOL: process.env.BENCH_OTLP_PROTOCOL ?? "http/protobuf",
      OTEL_EXPORTER_OTLP_COMPRESSION: process.env.BENCH_OTLP_COMPRESSION ?? "none",
    };
    procs.push(floor, ioFloor, api, apiUnnamed, ingest);
    /** Another API and vote-ingest (`-<suffix>`), started, answering their health checks. */
    const startPair = async (
      suffix: string,
      from: { api: string; ingest: string },
      extraEnv: Record<string, string>,
      args: (name: string) => string[],
    ): Promise<AppPair> => {
      const [apiPairPort, apiPairMetricsPort, ingestPairPort] = await Promise.all([
        freePort(),
        freePort(),
        freePort(),
      ]);
      let pairApi: Proc | undefined;
      let pairIngest: Proc | undefined;
      const start = async () => {
        pairApi = await startNode(
          `api-${suffix}`,
          from.api,
          { ...env, ...extraEnv, API_PORT: String(apiPairPort), METRICS_PORT: String(apiPairMetricsPort) },
          [],
          args(`api-${suffix}`),
        );
        pairIngest = await startNode(
          `vote-ingest-${suffix}`,
          from.ingest,
          { ...env, ...extraEnv, INGEST_PORT: String(ingestPairPort) },
          [],
          args(`vote-ingest-${suffix}`),
        );
        procs.push(pairApi, pairIngest);
        // (A pair starts while the others run: on a loaded host that takes longer than 30 s.)
        await Promise.all([
          waitForHttp(`http://127.0.0.1:${apiPairPort}/api/health`, 120_000),
          waitForHttp(`http://127.0.0.1:${ingestPairPort}/health`, 120_000),
        ]);
      };
      await start();
      return {
        apiUrl: `http://127.0.0.1:${apiPairPort}`,
        apiMetricsUrl: `http://127.0.0.1:${apiPairMetricsPort}/metrics`,
        apiPid: () => pairApi?.child.pid,
        ingestUrl: `http://127.0.0.1:${ingestPairPort}`,
        ingestPid: () => pairIngest?.child.pid,
        async restart() {
          await Promise.all([pairApi?.stop(), pairIngest?.stop()]);
          await start();
        },
      };
    };
    const traced = await startPair("traced", entries, tracingEnv, profileArgs);
    const sampledTracingEnv = {
      ...tracingEnv,
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
      // BENCH_SAMPLED_RATIO (default 0.1): 0 measures what exporting costs a request it does not sample.
      OTEL_TRACES_SAMPLER_ARG: process.env.BENCH_SAMPLED_RATIO ?? "0.1",
    };
    const sampled = await startPair("sampled", entries, sampledTracingEnv, profileArgs);
    const untraced = await startPair("untraced", entries, {}, profileArgs);
    // BENCH_BASE_APPS: another commit's API and vote-ingest, tracing off as `untraced`.
    const baseDir = process.env.BENCH_BASE_APPS;
    const base: AppPair | undefined = baseDir
      ? await startPair(
          "base",
          { api: path.resolve(baseDir, "api/main.js"), ingest: path.resolve(baseDir, "vote-ingest/main.js") },
          {},
          () => nodeArgs,
        )
      : undefined;
    await Promise.all([
      waitForHttp(`http://127.0.0.1:${floorPort}/health`),
      waitForHttp(`http://127.0.0.1:${ioFloorPort}/health`),
      waitForHttp(`http://127.0.0.1:${apiPort}/api/health`),
      waitForHttp(`http://127.0.0.1:${apiUnnamedPort}/api/health`),
      waitForHttp(`http://127.0.0.1:${ingestPort}/health`),
    ]);

    const dispatcherPorts = [dispatcherPort, dispatcher2Port, await freePort()];
    let dispatchers: Proc[] = [];
    const stopDispatchers = async () => {
      await Promise.all(dispatchers.map((d) => d.stop()));
      dispatchers = [];
    };
    const startDispatcherBuilds = async (builds: { entry?: string; env?: Record<string, string> }[]) => {
      await stopDispatchers();
      if (builds.length > dispatcherPorts.length) {
        throw new Error(`at most ${dispatcherPorts.length} dispatchers run side by side`);
      }
      for (const [i, build] of builds.entries()) {
        const d = await startNode(
          `webhook-dispatcher-${i + 1}`,
          build.entry ?? entries.dispatcher,
          { ...env, ...build.env, DISPATCHER_PORT: String(dispatcherPorts[i]) },
          [],
          i === 0 ? profileArgs("webhook-dispatcher") : nodeArgs,
        );
        dispatchers.push(d);
        procs.push(d);
      }
      await Promise.all(
        dispatcherPorts.slice(0, builds.length).map((p) => waitForHttp(`http://127.0.0.1:${p}/health`)),
      );
      return [...dispatchers];
    };
    const startDispatchers = (n: number, entry = entries.dispatcher, extraEnv = {}) =>
      startDispatcherBuilds(Array.from({ length: n }, () => ({ entry, env: extraEnv })));
    await startDispatchers(1);

    const startSenderFloor = async (
      targets: { url: string; botId: string }[],
      client: "got" | "node" = "got",
    ): Promise<SenderFloor> => {
      const port = await freePort();
      const file = path.join(tmpdir(), `${dbName}-sender-floor.json`);
      writeFileSync(file, JSON.stringify(targets));
      const proc = await startNode(
        `sender-floor-${client}`,
        entries.senderFloor,
        { ...env, SENDER_FLOOR_CLIENT: client },
        [String(port), file],
        nodeArgs,
      );
      procs.push(proc);
      const base = `http://127.0.0.1:${port}`;
      await waitForHttp(`${base}/health`);
      rmSync(file); // read at start-up
      return {
        pid: proc.child.pid,
        send: async (n) => {
          const res = await fetch(`${base}/send?n=${n}`, { method: "POST" });
          if (!res.ok) throw new Error(`sender floor: ${res.status} ${await res.text()}`);
          return (await res.json()) as { sent: number; delivered: number };
        },
        stop: () => proc.stop(),
      };
    };

    const memory: Record<string, number[]> = { api: [], "vote-ingest": [], "webhook-dispatcher": [] };
    sampler = setInterval(() => {
      memory.api?.push(rssMb(api.child.pid));
      memory["vote-ingest"]?.push(rssMb(ingest.child.pid));
      for (const d of dispatchers) memory["webhook-dispatcher"]?.push(rssMb(d.child.pid));
    }, 1_000);

    db = new pg.Client({ connectionString: dbUrl });
    db.on("error", () => {}); // the scratch database is dropped at the end, even after a failure
    await db.connect();
    return {
      dbName,
      dbUrl,
      db,
      redisUrl: redis.url,
      redisPid: () => redis.pid(),
      receiver,
      seeded,
      internalKey,
      env,
      nodeArgs,
      floorUrl: `http://127.0.0.1:${floorPort}`,
      ioFloorUrl: `http://127.0.0.1:${ioFloorPort}`,
      ioFloorPid: () => ioFloor.child.pid,
      apiUrl: `http://127.0.0.1:${apiPort}`,
      apiMetricsUrl: `http://127.0.0.1:${apiMetricsPort}/metrics`,
      apiUnnamedUrl: `http://127.0.0.1:${apiUnnamedPort}`,
      apiUnnamedMetricsUrl: `http://127.0.0.1:${apiUnnamedMetricsPort}/metrics`,
      apiUnnamedPid: () => apiUnnamed.child.pid,
      traced,
      sampled,
      untraced,
      ...(base ? { base } : {}),
      otlp,
      tracingEnv,
      sampledTracingEnv,
      ingestUrl: `http://127.0.0.1:${ingestPort}`,
      floorPid: () => floor.child.pid,
      apiPid: () => api.child.pid,
      ingestPid: () => ingest.child.pid,
      dispatcherMetricsUrl: `http://127.0.0.1:${dispatcherPort}/metrics`,
      startDispatchers,
      startDispatcherBuilds,
      dispatcherMetricsUrls: dispatcherPorts.map((p) => `http://127.0.0.1:${p}/metrics`),
      stopDispatchers,
      startSenderFloor,
      memory: () =>
        Object.fromEntries(
          Object.entries(memory).map(([name, samples]) => [
            name,
            {
              max: Math.max(...samples),
              first: samples[0] ?? 0,
              last: samples.at(-1) ?? 0,
              samples: samples.length,
            },
          ]),
        ),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
