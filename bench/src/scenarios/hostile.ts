/**
 * `hostile`: 10 % of the bots' receivers hold every request until the dispatcher's timeout, 10 %
 * answer 500 at once, 5 % have a host name that does not resolve (`*.invalid`), 75 % are healthy.
 * One fresh dispatcher, two seconds of warm-up, then votes at an even 500/s: the healthy bots' vote
 * → delivery latency (target p99 < 250 ms). Then the queue is filled with the same mix while no
 * dispatcher runs, and one replica drains it (target ≥ 1,000 healthy deliveries/s).
 */
import { load, paced } from "../load.js";
import { HOSTILE_OK_PATH, median, percentile, sleep } from "../pipeline.js";
import { log, type Stack } from "../stack.js";

type Build = () => { path: string; headers?: Record<string, string>; body?: string };

export interface HostileResult {
  healthyLatencyMs: { p50: number; p99: number; samples: number; expected: number };
  /** Healthy deliveries per second while votes arrive at 500/s (≈ 375/s is all there is). */
  healthyPerSecondAt500: number;
  /** Queue drain: healthy deliveries per second from first to last healthy receipt. */
  drain: { votes: number; healthy: number; delivered: number; perSecond: number; seconds: number };
  hostileRequests: { failed: number; held: number };
}

export async function hostile(
  stack: Stack,
  settings: { connections: number },
  bots: string[],
  healthy: Set<string>,
  options: { seconds: number; drainVotes: number },
): Promise<HostileResult> {
  let voter = 0;
  let healthyCast = 0;
  // User ids 8… for the warm-up, 6… while votes arrive at 500/s, 7… for the drain: the receiver
  // counts each range apart, so deliveries of warm-up votes that arrive after it (a slow machine
  // is still delivering them) are not counted as the measured phase's.
  let userBase = 8000000000000000000n;
  const build: Build = () => {
    const bot = bots[voter % bots.length] as string;
    if (healthy.has(bot)) healthyCast++;
    return {
      path: "/internal/v1/votes",
      headers: { authorization: stack.internalKey },
      body: `{"bot_id":"${bot}","user_id":"${userBase + BigInt(voter++)}"}`,
    };
  };
  const receiver = stack.receiver;
  await stack.startDispatchers(1);
  // Two seconds of warm-up at the same rate, not measured.
  await paced(stack.ingestUrl, 500, 2, settings.connections, build);
  await sleep(500);
  const MEASURED = `${HOSTILE_OK_PATH}@6`;
  userBase = 6000000000000000000n;
  receiver.reset(MEASURED);
  healthyCast = 0;
  const from = Date.now();
  await paced(stack.ingestUrl, 500, options.seconds, settings.connections, build);
  const to = Date.now();
  const expected = healthyCast;
  const deadline = Date.now() + 5_000;
  while (receiver.received(MEASURED) < expected && Date.now() < deadline) await sleep(20);
  const latencies = [...receiver.latencies(MEASURED)];
  const healthyPerSecondAt500 = Math.round(
    receiver.receivedBetween(from, to, MEASURED) / ((to - from) / 1000),
  );
  log(
    `hostile at 500 votes/s: healthy p50 ${median(latencies)} ms, p99 ${percentile(latencies, 99)} ms ` +
      `(${latencies.length} of ${expected} healthy deliveries), ${healthyPerSecondAt500} healthy deliveries/s`,
  );

  // Drain: the queue filled with the same mix while no dispatcher runs, then one replica.
  await stack.stopDispatchers();
  healthyCast = 0;
  userBase = 7000000000000000000n;
  const DRAIN = `${HOSTILE_OK_PATH}@7`;
  await load({
    url: stack.ingestUrl,
    method: "POST",
    durationS: 120,
    connections: settings.connections,
    request: build,
    amount: options.drainVotes,
  });
  const drainHealthy = healthyCast;
  // Healthy jobs left over from the 500/s phase are still queued; they are not counted here.
  await stack.startDispatchers(1);
  const drainDeadline = Date.now() + 120_000;
  while (receiver.received(DRAIN) < drainHealthy && Date.now() < drainDeadline) await sleep(20);
  const delivered = receiver.received(DRAIN);
  const { first, last } = receiver.window(DRAIN);
  const seconds = Math.max(0.001, (last - first) / 1000);
  const drain = {
    votes: options.drainVotes,
    healthy: drainHealthy,
    delivered,
    perSecond: Math.round(delivered / seconds),
    seconds: Math.round(seconds * 10) / 10,
  };
  log(
    `hostile drain, 1 dispatcher: ${delivered}/${drainHealthy} healthy delivered in ${drain.seconds} s = ${drain.perSecond} healthy deliveries/s ` +
      `(${options.drainVotes} votes in the queue; hostile requests so far: ${JSON.stringify(receiver.hostile())})`,
  );
  await stack.stopDispatchers();
  return {
    healthyLatencyMs: {
      p50: median(latencies),
      p99: percentile(latencies, 99),
      samples: latencies.length,
      expected,
    },
    healthyPerSecondAt500,
    drain,
    hostileRequests: receiver.hostile(),
  };
}
