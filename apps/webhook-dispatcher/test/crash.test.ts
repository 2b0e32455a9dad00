/**
 * A real dispatcher process (src/main.ts) killed or stopped in the middle of an attempt.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { testRedisUrl } from "@botdir/db/testing";
import { waitFor } from "@botdir/service-kit/testing";
import { type DispatcherHarness, encryptionKey, startDispatcherHarness } from "./support.js";

const MAIN = fileURLToPath(new URL("../src/main.ts", import.meta.url));
const APP_DIR = fileURLToPath(new URL("..", import.meta.url));

let h: DispatcherHarness;
const children: ChildProcess[] = [];

// No worker in this process: the dispatcher under test is a child process.
beforeAll(async () => {
  h = await startDispatcherHarness({ workers: [] });
});

afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await h.close();
});

function spawnDispatcher(): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const { NODE_OPTIONS: _ignored, ...inherited } = process.env;
  const child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    cwd: APP_DIR,
    env: {
      ...inherited,
      NODE_ENV: "test",
      LOG_LEVEL: "warn",
      DATABASE_URL: h.t.url,
      REDIS_URL: testRedisUrl(),
      QUEUE_PREFIX: h.prefix,
      SECRET_ENCRYPTION_KEY: encryptionKey.toString("hex"),
      DISPATCHER_PORT: "0",
      DISPATCHER_CONCURRENCY: "2",
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
      WEBHOOK_TIMEOUT_MS: "2000",
      WEBHOOK_RETRY_DELAYS_MS: "50,50,50,50",
      DISPATCHER_LOCK_DURATION_MS: "1000",
      DISPATCHER_STALLED_INTERVAL_MS: "500",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let output = "";
  child.stdout?.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr?.on("data", (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, output: () => output, exited };
}

async function arrange(reply: Parameters<DispatcherHarness["receiver"]>[0]) {
  const receiver = await h.receiver(reply);
  const { delivery } = await h.arrange(receiver.url(), { secret: "secret" });
  return { receiver, delivery };
}

describe("a dispatcher process that stops mid-attempt", () => {
  it("when it is SIGKILLed during an attempt, then another replica completes the delivery: one success, the lost attempt counted", async () => {
    const { receiver, delivery } = await arrange((_req, n) => (n === 1 ? "hang" : { status: 204 }));
    const dispatcher = spawnDispatcher();
    await h.handOff(delivery);
    await waitFor(
      async () => receiver.requests.length === 1,
      "the first attempt to reach the receiver",
      30_000,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\n${dispatcher.output()}`);
    });

    dispatcher.child.kill("SIGKILL");
    await dispatcher.exited;
    // Closed before the next test, whose job must go to the dispatcher process.
    const replica = await h.addWorker({ lockDurationMs: 1_000, stalledIntervalMs: 500 });
    try {
      await h.waitForState(delivery.id, "delivered", 30_000);
    } finally {
      await replica.close();
    }

    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([
      [1, null, "interrupted"],
      [2, 204, null],
    ]);
    expect(attempts.filter((a) => a.errorKind === null)).toHaveLength(1);
    expect(receiver.requests).toHaveLength(2);
    expect(new Set(receiver.requests.map((r) => r.headers["x-webhook-delivery"]))).toEqual(
      new Set([delivery.id]),
    );
  });

  it("when it gets SIGTERM during an attempt, then it finishes and records that attempt before exiting 0", async () => {
    const { receiver, delivery } = await arrange(() => ({ status: 204, delayMs: 700 }));
    const dispatcher = spawnDispatcher();
    await h.handOff(delivery);
    await waitFor(async () => receiver.requests.length === 1, "the attempt to reach the receiver", 30_000);

    dispatcher.child.kill("SIGTERM");
    const code = await dispatcher.exited;

    expect(code).toBe(0);
    const attempts = await h.attempts(delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual([[1, 204, null]]);
    const row = await h.db.prisma.delivery.findUniqueOrThrow({ where: { id: delivery.id } });
    expect(row.state).toBe("delivered");
  });
});
