/**
 * Vote → webhook on its own. Throughput: votes are cast while no dispatcher runs (the jobs wait in
 * the queue), then N dispatchers start and the drain to the local receiver is timed from first to
 * last receipt. Latency: one dispatcher, votes cast at an even 500/s after two seconds of warm-up,
 * time from `voted_at` to receipt.
 */
import { load, paced } from "../load.js";
import { percentile } from "../pipeline.js";
import { log, type Stack, WEBHOOK_BOTS } from "../stack.js";

export interface WebhookResult {
  throughput: Record<string, { votes: number; delivered: number; perSecond: number }>;
  latencyAt500PerSecond: { p50: number; p99: number; samples: number };
}

export async function webhook(stack: Stack, settings: { connections: number }): Promise<WebhookResult> {
  const { receiver, seeded, ingestUrl } = stack;
  const deliveries: WebhookResult["throughput"] = {};
  let webhookVoter = 0;
  const voteRequest = () => ({
    path: "/internal/v1/votes",
    headers: { authorization: stack.internalKey },
    body: `{"bot_id":"${seeded.webhookBots[webhookVoter % WEBHOOK_BOTS]}","user_id":"${4000000000000000000n + BigInt(webhookVoter++)}"}`,
  });
  async function waitDelivered(target: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (receiver.received() < target && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  }
  async function throughput(label: string, replicas: number, votes: number) {
    await stack.stopDispatchers();
    const before = receiver.received();
    await load({
      url: ingestUrl,
      method: "POST",
      durationS: 120,
      connections: settings.connections,
      request: voteRequest,
      amount: votes,
    });
    receiver.reset();
    await stack.startDispatchers(replicas);
    await waitDelivered(before + votes, 120_000);
    const delivered = receiver.received() - before;
    const { first, last } = receiver.window();
    const seconds = Math.max(0.001, (last - first) / 1000);
    deliveries[label] = { votes, delivered, perSecond: Math.round(delivered / seconds) };
    log(
      `vote → webhook, ${label}: ${delivered}/${votes} delivered, ${deliveries[label].perSecond} deliveries/s (queue drain, first to last receipt)`,
    );
  }
  await throughput("1 dispatcher, pre-filled queue drain", 1, 10_000);
  await throughput("2 dispatchers, pre-filled queue drain", 2, 10_000);
  await stack.startDispatchers(1);
  // Votes at an even 500/s (BENCH_VOTE_PACING=autocannon: autocannon's overallRate, bursts).
  const votesAt500 = (durationS: number) =>
    process.env.BENCH_VOTE_PACING === "autocannon"
      ? load({
          url: ingestUrl,
          method: "POST",
          durationS,
          connections: settings.connections,
          overallRate: 500,
          request: voteRequest,
        })
      : paced(ingestUrl, 500, durationS, settings.connections, voteRequest);
  // Two seconds of warm-up at the same rate (JIT, pool and keep-alive connections), not measured:
  // the figure is the steady state of a running dispatcher, not its first seconds.
  const warm = receiver.received();
  await votesAt500(2);
  await waitDelivered(warm + 1_000, 10_000);
  receiver.reset();
  const before = receiver.received();
  await votesAt500(10);
  await waitDelivered(before + 5_000, 10_000);
  const latency = {
    p50: percentile(receiver.latencies(), 50),
    p99: percentile(receiver.latencies(), 99),
    samples: receiver.latencies().length,
  };
  log(
    `vote → webhook latency at 500 votes/s, 1 dispatcher: p50 ${latency.p50} ms, p99 ${latency.p99} ms (${latency.samples} deliveries)`,
  );
  return { throughput: deliveries, latencyAt500PerSecond: latency };
}
