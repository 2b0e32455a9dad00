/**
 * `recovery` (only with BENCH_ONLY=recovery): one bot's 100,000 undelivered votes (BENCH_RECOVERY_VOTES)
 * recovered while a quiet bot gets a vote every ~100 ms (docs/webhooks.md "Recovering undelivered
 * votes"). The loud bot's votes are seeded in the vote log, spread evenly from 10 hours to 10 minutes
 * ago whatever their number, half with a delivery that ended `failed`, half with none (cast while its
 * webhook was disabled); its webhook then points at the receiver. Each seeded failure ends 3 hours
 * after its vote but at the latest a minute before the seed: a recovery takes only failures that ended
 * before it was requested (packages/db/src/recoveries.ts), so every seeded vote is one it queues.
 * The quiet bot's votes are cast through vote-ingest at 10/s for `beforeS` seconds (the baseline),
 * then the recovery starts (the internal endpoint, as the edit page calls it) and they go on until
 * every recovered vote has arrived. One dispatcher, the
 * recovery driver's defaults (RECOVERY_BATCH, RECOVERY_INTERVAL_MS, RECOVERY_MAX_IN_FLIGHT).
 *
 * Reported: the quiet bot's vote → receipt latency p99 before and during the recovery (and their
 * ratio; the goal is ≤ 2), the time from the recover call to the last recovered vote's receipt, and
 * the cost per recovered vote: CPU ms of the scratch database's backends (/proc), of redis-server
 * and of vote-ingest (its recovery driver), and Redis commands (INFO commandstats), each with the
 * baseline's rate (the quiet bot alone, same processes) taken off.
 */
import { paced } from "../load.js";
import { percentile, sleep } from "../pipeline.js";
import { cpuSeconds, cpuSecondsBetween, postgresCpu, redisCommandCalls } from "../procs.js";
import { botId, log, type Stack } from "../stack.js";

export interface RecoveryResult {
  votes: number;
  /** What the recovery queued (its final state's `queued`): every seeded vote, `votes`. */
  queued: number;
  recovered: number;
  quietVotesPerSecond: number;
  quietP99BeforeMs: number;
  quietP99DuringMs: number;
  quietSamples: { before: number; during: number };
  /** quietP99DuringMs ÷ quietP99BeforeMs. */
  p99Ratio: number;
  /** From the recover call to the last recovered vote's receipt. */
  recoverSeconds: number;
  recoveredPerSecond: number;
  /** Per recovered vote, the baseline's rate taken off. */
  perVote: { postgresCpuMs: number; redisCpuMs: number; ingestCpuMs: number; redisCommands: number };
}

const LOUD_PATH = "/recover";
const QUIET_PATH = "/quiet";
const QUIET_RATE = 10;

interface Reading {
  at: number;
  postgres: ReturnType<typeof postgresCpu>;
  redis: number;
  ingest: number;
  calls: Record<string, number>;
}

async function read(stack: Stack): Promise<Reading> {
  return {
    at: Date.now(),
    postgres: postgresCpu(stack.dbName),
    redis: cpuSeconds(stack.redisPid()),
    ingest: cpuSeconds(stack.ingestPid()),
    calls: await redisCommandCalls(stack.redisUrl),
  };
}

const commandsBetween = (a: Reading, b: Reading) =>
  Object.entries(b.calls)
    .filter(([c]) => c !== "info")
    .reduce((n, [c, v]) => n + v - (a.calls[c] ?? 0), 0);

export async function recovery(
  stack: Stack,
  options: { votes: number; beforeS: number },
): Promise<RecoveryResult> {
  const { db, receiver } = stack;
  // Two new bots on the receiver's paths, signed with a seeded webhook bot's secret.
  const loud = botId(900_000);
  const quiet = botId(900_001);
  const secretOf = await db.query<{ s: string }>(
    "SELECT webhook_secret_encrypted AS s FROM bots WHERE id = $1",
    [stack.seeded.webhookBots[0]],
  );
  const secret = secretOf.rows[0]?.s;
  await db.query(
    `INSERT INTO bots (id, status, approved_at, webhook_url, webhook_secret_encrypted)
     VALUES ($1, 'approved', now(), $2, $4), ($3, 'approved', now(), $5, $4)`,
    [loud, receiver.url(LOUD_PATH, 7), quiet, secret, receiver.url(QUIET_PATH, 11)],
  );
  const seeded = Date.now();
  await db.query(
    `INSERT INTO vote_log (bot_id, user_id, voted_at)
     SELECT $1, (8000000000000000000 + g)::text,
            now() - interval '10 hours' + (g - 1) * (interval '590 minutes' / $2::int)
       FROM generate_series(1, $2::int) g`,
    [loud, options.votes],
  );
  await db.query(
    `INSERT INTO webhook_deliveries
            (id, bot_id, vote_id, state, attempts_made, next_attempt_at, handed_off_at, created_at,
             updated_at, completed_at)
     SELECT gen_random_uuid(), v.bot_id, v.id, 'failed', 5, v.voted_at, v.voted_at, v.voted_at,
            LEAST(v.voted_at + interval '3 hours', now() - interval '1 minute'),
            LEAST(v.voted_at + interval '3 hours', now() - interval '1 minute')
       FROM vote_log v WHERE v.bot_id = $1 AND v.id % 2 = 0`,
    [loud],
  );
  await db.query("ANALYZE vote_log");
  await db.query("ANALYZE webhook_deliveries");
  log(`recovery: seeded ${options.votes} undelivered votes of one bot in ${Date.now() - seeded} ms`);

  let voter = 0n;
  const quietVote = () => ({
    path: "/internal/v1/votes",
    headers: { authorization: stack.internalKey },
    body: `{"bot_id":"${quiet}","user_id":"${7000000000000000000n + voter++}"}`,
  });
  // Warm-up (not measured), then the baseline: the quiet bot alone.
  await paced(stack.ingestUrl, QUIET_RATE, 3, 1, quietVote);
  await sleep(1_000);
  receiver.reset(QUIET_PATH);
  const baseFrom = await read(stack);
  await paced(stack.ingestUrl, QUIET_RATE, options.beforeS, 1, quietVote);
  await sleep(1_000);
  const baseTo = await read(stack);
  const before = [...receiver.latencies(QUIET_PATH)];
  const baseS = (baseTo.at - baseFrom.at) / 1000;
  receiver.reset(QUIET_PATH);

  // The recovery, as the edit page starts it.
  const from = await read(stack);
  const started = await fetch(`${stack.ingestUrl}/internal/v1/bots/${loud}/webhook/recover`, {
    method: "POST",
    headers: { authorization: stack.internalKey, "content-type": "application/json" },
    body: JSON.stringify({ since: new Date(Date.now() - 11 * 3_600_000).toISOString() }),
  });
  const answer = (await started.json()) as { recoveryId?: string; queued?: number; error?: string };
  if (started.status !== 202 || !answer.recoveryId) {
    throw new Error(`recovery: the recover call answered ${started.status} ${JSON.stringify(answer)}`);
  }
  log(`recovery ${answer.recoveryId}: ${answer.queued} votes queued`);
  const deadline = Date.now() + Number(process.env.BENCH_RECOVERY_TIMEOUT_S ?? 1_800) * 1000;
  let lastLogged = 0;
  while (receiver.received(LOUD_PATH) < options.votes && Date.now() < deadline) {
    await paced(stack.ingestUrl, QUIET_RATE, 2, 1, quietVote);
    if (Date.now() - lastLogged > 30_000) {
      lastLogged = Date.now();
      log(`recovery: ${receiver.received(LOUD_PATH)}/${options.votes} recovered votes received`);
    }
  }
  const { last } = receiver.window(LOUD_PATH);
  const to = await read(stack);
  await sleep(1_500); // the quiet votes cast last
  const during = [...receiver.latencies(QUIET_PATH)];
  const recovered = receiver.received(LOUD_PATH);
  const state = await fetch(
    `${stack.ingestUrl}/internal/v1/bots/${loud}/webhook/recoveries/${answer.recoveryId}`,
    { headers: { authorization: stack.internalKey } },
  ).then((r) => r.json() as Promise<{ queued?: number }>);
  log(`recovery: final state ${JSON.stringify(state)}`);

  const spanS = (to.at - from.at) / 1000;
  const n = Math.max(1, recovered);
  const net = (during: number, baseline: number) => Math.max(0, during - (baseline / baseS) * spanS);
  const ms = (seconds: number) => Math.round(((seconds * 1000) / n) * 1000) / 1000;
  const p99Before = percentile(before, 99);
  const p99During = percentile(during, 99);
  const recoverSeconds = Math.round((last - from.at) / 100) / 10;
  const result: RecoveryResult = {
    votes: options.votes,
    queued: state.queued ?? 0,
    recovered,
    quietVotesPerSecond: QUIET_RATE,
    quietP99BeforeMs: p99Before,
    quietP99DuringMs: p99During,
    quietSamples: { before: before.length, during: during.length },
    p99Ratio: Math.round((p99During / p99Before) * 100) / 100,
    recoverSeconds,
    recoveredPerSecond: Math.round(recovered / Math.max(0.001, recoverSeconds)),
    perVote: {
      postgresCpuMs: ms(
        net(
          cpuSecondsBetween(from.postgres, to.postgres),
          cpuSecondsBetween(baseFrom.postgres, baseTo.postgres),
        ),
      ),
      redisCpuMs: ms(net(to.redis - from.redis, baseTo.redis - baseFrom.redis)),
      ingestCpuMs: ms(net(to.ingest - from.ingest, baseTo.ingest - baseFrom.ingest)),
      redisCommands:
        Math.round((net(commandsBetween(from, to), commandsBetween(baseFrom, baseTo)) / n) * 100) / 100,
    },
  };
  log(
    `recovery of ${recovered}/${options.votes} votes in ${recoverSeconds} s (${result.recoveredPerSecond}/s); ` +
      `quiet bot p99 ${p99Before} ms before (${before.length}), ${p99During} ms during (${during.length}): ×${result.p99Ratio}; ` +
      `per recovered vote: PostgreSQL ${result.perVote.postgresCpuMs} ms CPU, Redis ${result.perVote.redisCpuMs} ms CPU, ` +
      `${result.perVote.redisCommands} commands, vote-ingest ${result.perVote.ingestCpuMs} ms CPU`,
  );
  return result;
}
