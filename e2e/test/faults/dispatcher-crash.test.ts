/**
 * Fault: the dispatcher process is SIGKILLed while an attempt is in flight (the receiver holds the
 * request open). The vote was cast on the real vote-ingest; the delivery is completed by the
 * restarted dispatcher, or by a second replica, with at most five attempts and one success.
 */
import { randomUserId } from "@botdir/db/testing";
import { type AppProcess, waitFor } from "../../src/processes.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({
  privateRedis: true,
  replicas: { api: 0, "webhook-dispatcher": 0 },
  // The first request of each path hangs (the dispatcher is killed while waiting); later ones 204.
  reply: (_req, n) => (n === 1 ? "hang" : { status: 204 }),
  env: { WEBHOOK_TIMEOUT_MS: "3000" },
});

// Each test runs its own dispatchers; none may outlive it and take the next test's jobs.
const dispatchers: AppProcess[] = [];
async function startDispatcher() {
  const proc = await stack.start("webhook-dispatcher");
  dispatchers.push(proc);
  return proc;
}
afterEach(async () => {
  await Promise.all(dispatchers.splice(0).map((d) => d.kill()));
});

/**
 * Casts a vote with one dispatcher running (two with `twoReplicas`), waits for its attempt to hang,
 * then SIGKILLs the replica that sent it; returns the other one, if any.
 */
async function castAndKillMidAttempt(path: string, options: { twoReplicas: boolean }) {
  const bot = await stack.webhookBot(stack.receiver.url(path));
  // Both replicas run before the vote: no start-up has to fit inside the hanging attempt's timeout
  // (3 s; the kill follows the request within milliseconds).
  const replicas = await Promise.all(
    Array.from({ length: options.twoReplicas ? 2 : 1 }, () => startDispatcher()),
  );
  const cast = await stack.vote(bot.id, randomUserId());
  expect(cast.status).toBe(201);
  await waitFor(
    () => stack.receiver.forPath(path).length === 1,
    "the first attempt to reach the receiver",
    20_000,
  );
  const sender = stack.receiver.forPath(path)[0]!.remotePort;
  const holding = replicas.filter((r) => r.ownsConnection(sender, stack.receiver.port));
  expect(holding).toHaveLength(1);
  await holding[0]!.kill();
  return { bot, replica: replicas.find((r) => r !== holding[0]) ?? null };
}

async function expectCompletedOnce(botId: string, path: string) {
  const [delivery] = await waitFor(
    async () => {
      const rows = await stack.deliveries(botId);
      return rows.length === 1 && rows[0]!.state === "delivered" ? rows : null;
    },
    "the delivery to be delivered",
    30_000,
    100,
  );
  const attempts = await stack.attempts(delivery!.id);
  expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
    [1, null, "interrupted"],
    [2, 204, null],
  ]);
  expect(attempts.filter((a) => a.errorKind === null)).toHaveLength(1);
  expect(delivery!.attemptsMade).toBeLessThanOrEqual(5);
  const received = stack.receiver.forPath(path);
  expect(received).toHaveLength(2);
  expect(new Set(received.map((r) => r.headers["x-webhook-delivery"]))).toEqual(new Set([delivery!.id]));
  expect(received[0]!.body.equals(received[1]!.body)).toBe(true);
}

describe("dispatcher SIGKILLed mid-attempt, through the full stack", () => {
  it("when the only dispatcher is killed and restarted, then the vote's delivery completes once: attempt 1 interrupted, attempt 2 delivered", async () => {
    const { bot } = await castAndKillMidAttempt("/restart", { twoReplicas: false });
    await startDispatcher();
    await expectCompletedOnce(bot.id, "/restart");
  });

  it("when one of two replicas is killed, then the other completes the delivery once, without a restart", async () => {
    const { bot, replica } = await castAndKillMidAttempt("/replica", { twoReplicas: true });
    await expectCompletedOnce(bot.id, "/replica");
    expect(replica?.alive()).toBe(true);
  });
});
