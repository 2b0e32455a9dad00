/**
 * The hot paths against the floor: each path (`GET /check`, `POST /stats`, `PUT /commands`,
 * `GET /votes`, `POST /internal/v1/votes`, and the two refusals of `/check`) is loaded in rounds
 * alternating with the floor's same route, 32 connections, and reported as ours ÷ the floor, with
 * the CPU per request of every process taking part and, for the batched paths, the mean requests
 * per statement. `GET /check` and `POST /stats` also run against the floor with its I/O (rounds of
 * the bare floor, that floor and ours in turn). Then the 429 path (one token far over its limit)
 * and the ingest's durability (every 2xx of its rounds is in `vote_log`).
 */
import { randomBytes } from "node:crypto";
import { average, type LoadResult, load } from "../load.js";
import { cpuSeconds, cpuSecondsBetween, metricSums, postgresCpu } from "../procs.js";
import { type AppPair, BOTS, botId, log, type Stack, userId } from "../stack.js";

/** CPU microseconds per request of each process taking part, measured around a round. */
export type CpuShare = { server: number; postgres: number; redis: number; loadGenerator: number };

export interface PathRow {
  floor: LoadResult;
  ours: LoadResult;
  ratio: number;
  p99Ratio: number;
  /**
   * Rows against the floor with its I/O (`floor` above) also run the bare floor in each round
   * (bare, with I/O, ours): the floor with I/O ÷ the bare floor, and ours ÷ the bare floor.
   */
  bareFloor?: { rps: number; ioFloorVsBare: number; oursVsBare: number };
}

export interface PathsResult {
  paths: Record<string, PathRow>;
  cpuMicrosecondsPerRequest: Record<string, { ours: CpuShare; floor: CpuShare }>;
  /** Mean requests per batched statement during our rounds of a path (only batched paths). */
  requestsPerBatchedStatement: Record<string, number>;
  /**
   * The rows of traced apps (tracing on or 0.1 ÷ off): bytes their OTLP exports carried per
   * request of ours (a vote's, for the cast), received by the bench's sink during our rounds.
   */
  exportedBytesPerRequest: Record<string, number>;
  ingestDurability: { acknowledged: number; recorded: number };
  rateLimited: LoadResult;
}

type Method = "GET" | "POST" | "PUT";
type Build = () => { path: string; headers?: Record<string, string>; body?: string };

/** The batching counters (botdir_batch_*_total, summed) at an app's /metrics. */
async function batchCounters(url: string) {
  const [statements = 0, requests = 0] = await metricSums(url, [
    "botdir_batch_statements_total",
    "botdir_batch_requests_total",
  ]);
  return { statements, requests };
}

function meanCpu(xs: CpuShare[]): CpuShare {
  const m = (k: keyof CpuShare) => Math.round(xs.reduce((a, x) => a + x[k], 0) / Math.max(1, xs.length));
  return {
    server: m("server"),
    postgres: m("postgres"),
    redis: m("redis"),
    loadGenerator: m("loadGenerator"),
  };
}

export async function hotPaths(
  stack: Stack,
  settings: { roundS: number; rounds: number; connections: number; only: string[] | undefined },
): Promise<PathsResult> {
  const { seeded, internalKey } = stack;
  let rr = 0;
  // Bot 0 is the "429 GET /check" path's token, over its limit for a minute after that path: the
  // other paths take bots 1 … BOTS-1, so none of their requests is answered 429.
  const nextBot = () => 1 + (rr++ % (BOTS - 1));
  /** Casting a vote on `ours`, a new user each time from `firstUser` on (each row its own range). */
  const casting = (ours: string, firstUser: bigint) => {
    let voter = 0n;
    return {
      method: "POST" as const,
      ours,
      build: () => ({
        path: "/internal/v1/votes",
        headers: { authorization: internalKey },
        body: `{"bot_id":"${botId(nextBot())}","user_id":"${firstUser + voter++}"}`,
      }),
    };
  };
  const commands = JSON.stringify({
    commands: Array.from({ length: 100 }, (_, i) => ({
      name: `command-${i}`,
      description: `Does thing number ${i} for the people of the server`,
      type: 1,
      options: [{ type: 3, name: "target", description: "Who", required: false }],
    })),
  });
  const randomTokens = Array.from({ length: 10_000 }, () => randomBytes(32).toString("base64url"));
  /** The next bot in turn asks `/api/v1/bots/<its id><rest(i)>` (i its index) with its own token. */
  const ownBot = (method: Method, rest: (i: number) => string, body?: string) => ({
    method,
    ours: stack.apiUrl,
    build: () => {
      const i = nextBot();
      return {
        path: `/api/v1/bots/${botId(i)}${rest(i)}`,
        headers: { authorization: seeded.tokens[i] as string },
        ...(body === undefined ? {} : { body }),
      };
    },
  });
  /**
   * A row over the POST /stats bots' tokens (seeded.statsBots), in a rotation of its own: the n-th
   * request (from 1) goes to the next bot with body(n).
   */
  const statsBotRow = (method: Method, rest: string, body: (n: number) => string) => {
    let sent = 0;
    return {
      method,
      ours: stack.apiUrl,
      build: () => {
        const bot = seeded.statsBots[sent++ % seeded.statsBots.length] as { id: string; token: string };
        return {
          path: `/api/v1/bots/${bot.id}${rest}`,
          headers: { authorization: bot.token },
          body: body(sent),
        };
      },
    };
  };
  /**
   * `floor`: what `ours` is divided by (default the floor; the floor with its I/O; or, for the rows
   * comparing two builds or settings of one app, the other app of a Stack pair: `pair` set).
   */
  const paths: Record<
    string,
    { method: Method; ours: string; floor?: string; pair?: readonly AppPair[]; build: Build }
  > = {
    "GET /check": ownBot("GET", (i) => `/check?userId=${userId(1 + (i % 2))}`),
    "POST /stats": statsBotRow("POST", "/stats", (n) => `{"server_count":${1000 + (n % 7)}}`),
    // The commands window is 10 a minute per token: the row takes the 10,000 tokens of POST /stats'
    // bots in a rotation of its own (a separate window from theirs), so its answers are not 429s.
    "PUT /commands (100)": statsBotRow("PUT", "/commands", () => commands),
    "GET /votes?limit=100": ownBot("GET", () => "/votes?limit=100"),
    "POST /internal/v1/votes": casting(stack.ingestUrl, 3000000000001000000n),
    // Refusals: a random token each time (a pool of 10,000, none cached anywhere), and
    // one token far over its /check limit. Both against the floor's /check, like GET /check.
    "401 GET /check (random token)": {
      method: "GET",
      ours: stack.apiUrl,
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
      ours: stack.apiUrl,
      build: () => ({
        path: `/api/v1/bots/${botId(0)}/check?userId=${userId(1)}`,
        headers: { authorization: seeded.tokens[0] as string },
      }),
    },
  };

  // The same two paths on the API that sends every statement unnamed (DB_PREPARED_STATEMENTS=off,
  // as behind a transaction-pooling PgBouncer): what unnamed statements cost, in the same run.
  for (const name of ["GET /check", "POST /stats"]) {
    const named = paths[name];
    if (named) paths[`${name} (unnamed statements)`] = { ...named, ours: stack.apiUnnamedUrl };
  }
  // The same two paths against the floor that also does their I/O (src/floor.ts): the token's hash,
  // one Redis round trip and one PostgreSQL statement per batch, nothing else.
  for (const name of ["GET /check", "POST /stats"]) {
    const named = paths[name];
    if (named) paths[`${name} vs the floor with its I/O`] = { ...named, floor: stack.ioFloorUrl };
  }

  // Two pairs of the same app (stack.ts `AppPair`), in turn or together: `/check` and casting a vote
  // (its own user ids, beyond the durability check's) on `ours` ÷ on `other`.
  const check = paths["GET /check"];
  const comparePairs = (label: string, ours: AppPair, other: AppPair, firstUser: bigint) => {
    const pair = [ours, other] as const;
    if (check) paths[`GET /check (${label})`] = { ...check, ours: ours.apiUrl, floor: other.apiUrl, pair };
    paths[`POST /internal/v1/votes (${label})`] = {
      ...casting(ours.ingestUrl, firstUser),
      floor: other.ingestUrl,
      pair,
    };
  };
  const { traced, sampled, untraced, base } = stack;
  // Each pair row casts for users of its own range, apart from every scenario that counts its votes
  // by user range (webhook-mix: 5e18–6e18 and 9.0e18–9.1e18); below the largest user id, 2^63 − 1.
  // Tracing on (every span sampled and exported, src/otlp-sink.ts) ÷ off: what tracing costs.
  comparePairs("tracing on ÷ off", traced, untraced, 9150000000000000000n);
  // Tracing on at a tenth of new traces (parentbased_traceidratio 0.1, the advised sampling) ÷ off.
  comparePairs("tracing 0.1 ÷ off", sampled, untraced, 9170000000000000000n);
  /** The URLs of the apps that export spans: their rows report the bytes exported per request. */
  const exporters = new Set([traced.apiUrl, traced.ingestUrl, sampled.apiUrl, sampled.ingestUrl]);
  // This build ÷ the apps of BENCH_BASE_APPS (e.g. the code before traces), tracing off in both:
  // what a change costs.
  if (base) comparePairs("this build ÷ base", untraced, base, 9190000000000000000n);

  /** Every server a row loads, by URL: its process and its /metrics. */
  const servers = new Map<string, { pid: () => number | undefined; metricsUrl: string }>([
    [stack.floorUrl, { pid: stack.floorPid, metricsUrl: "" }],
    [stack.ioFloorUrl, { pid: stack.ioFloorPid, metricsUrl: "" }],
    [stack.apiUrl, { pid: stack.apiPid, metricsUrl: stack.apiMetricsUrl }],
    [stack.apiUnnamedUrl, { pid: stack.apiUnnamedPid, metricsUrl: stack.apiUnnamedMetricsUrl }],
    [stack.ingestUrl, { pid: stack.ingestPid, metricsUrl: `${stack.ingestUrl}/metrics` }],
    ...[traced, sampled, untraced, ...(base ? [base] : [])].flatMap((pair) => [
      [pair.apiUrl, { pid: pair.apiPid, metricsUrl: pair.apiMetricsUrl }] as const,
      [pair.ingestUrl, { pid: pair.ingestPid, metricsUrl: `${pair.ingestUrl}/metrics` }] as const,
    ]),
  ]);
  const serverOf = (url: string) => {
    const server = servers.get(url);
    if (!server) throw new Error(`the bench does not know the server at ${url}`);
    return server;
  };

  const cpuOf = (serverPid: number | undefined) => ({
    server: cpuSeconds(serverPid),
    postgres: postgresCpu(stack.dbName),
    redis: cpuSeconds(stack.redisPid()),
    loadGenerator: cpuSeconds(process.pid),
  });
  type CpuReading = ReturnType<typeof cpuOf>;
  const perRequest = (before: CpuReading, after: CpuReading, requests: number): CpuShare => {
    const us = (seconds: number) => Math.round((seconds * 1e6) / Math.max(1, requests));
    return {
      server: us(after.server - before.server),
      postgres: us(cpuSecondsBetween(before.postgres, after.postgres)),
      redis: us(after.redis - before.redis),
      loadGenerator: us(after.loadGenerator - before.loadGenerator),
    };
  };
  const result: PathsResult = {
    paths: {},
    cpuMicrosecondsPerRequest: {},
    requestsPerBatchedStatement: {},
    exportedBytesPerRequest: {},
    ingestDurability: { acknowledged: 0, recorded: 0 },
    rateLimited: { rps: 0, p50: 0, p99: 0, non2xx: 0, errors: 0, total: 0 },
  };
  const { only } = settings;
  const round = (url: string, spec: { method: Method; build: Build }) =>
    load({
      url,
      method: spec.method,
      durationS: settings.roundS,
      connections: settings.connections,
      request: spec.build,
    });
  for (const [name, spec] of Object.entries(paths)) {
    // BENCH_ONLY="check,stats" runs only the paths whose name contains one of the words.
    if (only && !only.some((w) => name.toLowerCase().includes(w))) continue;
    const serverPid = serverOf(spec.ours).pid();
    const floorUrl = spec.floor ?? stack.floorUrl;
    const floorPid = serverOf(floorUrl).pid();
    const { metricsUrl } = serverOf(spec.ours);
    const batchesBefore = await batchCounters(metricsUrl);
    const floorRuns: LoadResult[] = [];
    const floorCpu: CpuShare[] = [];
    const ourRuns: LoadResult[] = [];
    const ourCpu: CpuShare[] = [];
    const bareRuns: LoadResult[] = [];
    // The OTLP sink's bytes during our rounds (only the app of `ours` exports to it then: every
    // other exporter is idle), over our requests. Spans are exported a second or so after they
    // end: a round's window takes the tail of what ran before it and leaves its own tail to the
    // next, alike under a steady load.
    let exportedBytes = 0;
    let exportedRequests = 0;
    const exportsBefore = () => stack.otlp.received().bytes;
    // Two builds of the same app (rows "tracing on ÷ off", "this build ÷ base") take turns at going
    // first: the second of a pair runs on what the first left (caches, the vote log grown by the
    // cast) and was measured ≈ 5 % dearer in CPU per request than the same build going first.
    const turns = spec.pair !== undefined;
    // BENCH_PAIR_TOGETHER=1: those two builds are loaded at once instead, each by its own load
    // generator with all the connections, so both run through the same moments of the machine's
    // load; each one's CPU per request is its own process's over its own requests (PostgreSQL's,
    // Redis's and the load generator's shares then cover both and are not per build). Each round
    // runs on freshly started processes, warmed by a round of 2 s first: a process's CPU per
    // request differs by a few % from one start to the next (code layout, JIT), which more rounds
    // of the same processes cannot average out.
    const together = turns && process.env.BENCH_PAIR_TOGETHER === "1";
    if (turns && !together) {
      // Both builds warmed first (2 s each, not measured): a process's first seconds of a path run
      // its code unoptimised, and one of the pair may have served the path in an earlier row.
      for (const url of [spec.ours, floorUrl]) {
        await load({
          url,
          method: spec.method,
          durationS: 2,
          connections: settings.connections,
          request: spec.build,
        });
      }
    }
    for (let i = 0; i < settings.rounds; i++) {
      if (together) {
        await Promise.all((spec.pair ?? []).map((pair) => pair.restart()));
        const [oursPid, otherPid] = [serverOf(spec.ours).pid(), serverOf(floorUrl).pid()];
        const warm = (url: string) =>
          load({
            url,
            method: spec.method,
            durationS: 2,
            connections: settings.connections,
            request: spec.build,
          });
        await Promise.all([warm(spec.ours), warm(floorUrl)]);
        const before = [cpuOf(oursPid), cpuOf(otherPid)] as const;
        const bytesBefore = exportsBefore();
        const [r, fr] = await Promise.all([round(spec.ours, spec), round(floorUrl, spec)]);
        exportedBytes += exportsBefore() - bytesBefore;
        exportedRequests += r.total;
        ourRuns.push(r);
        ourCpu.push(perRequest(before[0], cpuOf(oursPid), r.total));
        floorRuns.push(fr);
        floorCpu.push(perRequest(before[1], cpuOf(otherPid), fr.total));
        continue;
      }
      if (floorUrl === stack.ioFloorUrl) bareRuns.push(await round(stack.floorUrl, spec));
      const ours = async () => {
        const before = cpuOf(serverPid);
        const bytesBefore = exportsBefore();
        const r = await round(spec.ours, spec);
        exportedBytes += exportsBefore() - bytesBefore;
        exportedRequests += r.total;
        ourRuns.push(r);
        ourCpu.push(perRequest(before, cpuOf(serverPid), r.total));
      };
      if (turns && i % 2 === 1) await ours();
      // BENCH_NO_FLOOR=1 (profiling only) skips the floor rounds; ratios are then meaningless.
      if (process.env.BENCH_NO_FLOOR !== "1") {
        const before = cpuOf(floorPid);
        const r = await round(floorUrl, spec);
        floorRuns.push(r);
        floorCpu.push(perRequest(before, cpuOf(floorPid), r.total));
      }
      if (!(turns && i % 2 === 1)) await ours();
    }
    const f =
      floorRuns.length > 0 ? average(floorRuns) : { rps: 1, p50: 0, p99: 0, non2xx: 0, errors: 0, total: 0 };
    const o = average(ourRuns);
    // A floor that refuses or drops requests answers faster than any real route: its rate would
    // measure nothing.
    for (const [which, runs] of [
      ["floor", floorRuns],
      ["bare floor", bareRuns],
    ] as const) {
      const bad = runs.reduce((a, r) => a + r.non2xx + r.errors, 0);
      if (bad > 0) throw new Error(`${name}: the ${which} answered ${bad} requests with no 2xx`);
    }
    result.cpuMicrosecondsPerRequest[name] = { ours: meanCpu(ourCpu), floor: meanCpu(floorCpu) };
    if (turns) {
      // Per round, odd rounds with ours first: how much going second weighs is visible here.
      log(
        `${name}: server CPU µs per request by round, ours ${ourCpu.map((c) => c.server).join(" ")}; ` +
          `the other ${floorCpu.map((c) => c.server).join(" ")}`,
      );
    }
    const batchesAfter = await batchCounters(metricsUrl);
    // (Processes restarted between rounds start their counters again: no figure then.)
    const batchSize =
      !together && batchesAfter.statements > batchesBefore.statements
        ? Math.round(
            ((batchesAfter.requests - batchesBefore.requests) /
              (batchesAfter.statements - batchesBefore.statements)) *
              10,
          ) / 10
        : undefined;
    if (batchSize !== undefined) result.requestsPerBatchedStatement[name] = batchSize;
    if (exporters.has(spec.ours) && exportedRequests > 0) {
      result.exportedBytesPerRequest[name] = Math.round(exportedBytes / exportedRequests);
    }
    const ratio = (a: number, b: number) => Math.round((a / Math.max(b, 1)) * 100) / 100;
    const bare = bareRuns.length > 0 ? average(bareRuns) : null;
    const row: PathRow = {
      floor: f,
      ours: o,
      ratio: ratio(o.rps, f.rps),
      p99Ratio: ratio(o.p99, f.p99),
      ...(bare
        ? {
            bareFloor: {
              rps: bare.rps,
              ioFloorVsBare: ratio(f.rps, bare.rps),
              oursVsBare: ratio(o.rps, bare.rps),
            },
          }
        : {}),
    };
    result.paths[name] = row;
    if (o.non2xx > 0) {
      // Which answers were not 2xx (a 429 row expects them; any other row should say why).
      const statuses: Record<string, number> = {};
      for (const r of ourRuns) {
        for (const [status, count] of Object.entries(r.statuses ?? {})) {
          if (!status.startsWith("2")) statuses[status] = (statuses[status] ?? 0) + count;
        }
      }
      row.ours.statuses = statuses;
      log(`${name}: ours answered non-2xx ${JSON.stringify(statuses)}`);
    }
    const bytes = result.exportedBytesPerRequest[name];
    log(
      `${name}: ${bytes === undefined ? "" : `${bytes} bytes exported per request; `}ours ${o.rps} req/s (p50 ${o.p50} ms, p99 ${o.p99} ms, non-2xx ${o.non2xx}) vs floor ${f.rps} req/s (p99 ${f.p99} ms) = ${row.ratio}×${batchSize ? `, ${batchSize} requests per statement` : ""}` +
        (row.bareFloor
          ? `; the bare floor ${row.bareFloor.rps} req/s: floor with I/O ${row.bareFloor.ioFloorVsBare}×, ours ${row.bareFloor.oursVsBare}× of it`
          : ""),
    );
  }

  // Every 2xx of the ingest run must be durably recorded.
  const votes = result.paths["POST /internal/v1/votes"];
  result.ingestDurability = {
    acknowledged: (votes?.ours.total ?? 0) - (votes?.ours.non2xx ?? 0),
    recorded: Number(
      (
        await stack.db.query(
          "SELECT count(*) FROM vote_log WHERE user_id BETWEEN '3000000000000000000' AND '3999999999999999999'",
        )
      ).rows[0].count,
    ),
  };

  // The 429 path: one token far over its limit.
  result.rateLimited = await load({
    ...(only && !only.includes("429") ? { amount: settings.connections } : {}),
    url: stack.apiUrl,
    durationS: settings.roundS,
    connections: settings.connections,
    request: () => ({
      path: `/api/v1/bots/${botId(0)}/votes?limit=1`,
      headers: { authorization: seeded.tokens[0] as string },
    }),
  });
  const limited = result.rateLimited;
  log(`429 path: ${limited.rps} req/s, p99 ${limited.p99} ms, non-2xx ${limited.non2xx} of ${limited.total}`);
  return result;
}
