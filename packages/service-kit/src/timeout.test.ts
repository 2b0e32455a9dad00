import { type AddressInfo, connect, createServer } from "node:net";
import type { Redis } from "ioredis";
import { runHealthChecks } from "./health.js";
import { boundedRead } from "./metrics.js";
import { connectRedis } from "./testing.js";
import { TimeoutError, withLoopTimeout, withTimeout } from "./timeout.js";

describe("withTimeout", () => {
  it("passes a value or an error through when the promise settles in time", async () => {
    await expect(withTimeout(Promise.resolve(7), 1_000)).resolves.toBe(7);
    await expect(withTimeout(Promise.reject(new Error("boom")), 1_000)).rejects.toThrow("boom");
  });

  it("rejects with TimeoutError when the promise is slower than the deadline", async () => {
    const never = new Promise<number>(() => {});
    const error = await withTimeout(never, 10).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TimeoutError);
    expect((error as Error).message).toBe("no answer within 10 ms");
  });
});

/** A reply over a real socket: it arrives while the loop is busy, and is read in the poll phase. */
async function echoServer() {
  const server = createServer((socket) => socket.on("data", (d) => socket.write(d)));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve) => socket.once("connect", resolve));
  const ask = () => {
    const reply = new Promise<string>((resolve) => socket.once("data", (d) => resolve(String(d))));
    socket.write("ping");
    return reply;
  };
  const close = () => {
    socket.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return { ask, close };
}

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {}
}

describe("withLoopTimeout", () => {
  it("when the loop is busy past the deadline and the answer came meanwhile, then the answer wins", async () => {
    const echo = await echoServer();
    try {
      for (let i = 0; i < 5; i++) {
        const reply = withLoopTimeout(echo.ask(), 20);
        busy(150);
        await expect(reply).resolves.toBe("ping");
      }
    } finally {
      await echo.close();
    }
  });

  it("when nothing answers, then it rejects with TimeoutError by the deadline, at most maxMs with a busy loop", async () => {
    const never = new Promise<number>(() => {});
    await expect(withLoopTimeout(never, 10)).rejects.toBeInstanceOf(TimeoutError);
    const started = performance.now();
    const late = withLoopTimeout(never, 10, 200).catch((e: unknown) => e);
    busy(50);
    expect(await late).toBeInstanceOf(TimeoutError);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it("passes a value or an error through", async () => {
    await expect(withLoopTimeout(Promise.resolve(7), 1_000)).resolves.toBe(7);
    await expect(withLoopTimeout(Promise.reject(new Error("boom")), 1_000)).rejects.toThrow("boom");
  });
});

describe("the health checks and the scrape's reads on a busy loop", () => {
  // Redis runs in its own process: its reply arrives while this loop is busy, as in production.
  let redis: Redis;
  beforeAll(async () => {
    redis = await connectRedis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379");
  });
  afterAll(() => redis.quit());

  it("when Redis answered while the loop was busy past the check's timeout, then the check is ok and the read has it", async () => {
    const report = runHealthChecks({ redis: () => redis.ping() }, 50);
    busy(300);
    await expect(report).resolves.toEqual({ ok: true, body: { status: "ok", checks: { redis: "ok" } } });
    const read = boundedRead(() => redis.ping(), 50);
    await Promise.resolve(); // boundedRead starts the read in a microtask: let it go out first
    busy(300);
    await expect(read).resolves.toBe("PONG");
  });

  it("when a store does not answer, then the check is down and the read undefined", async () => {
    const never = () => new Promise<never>(() => {});
    const report = await runHealthChecks({ postgres: never, redis: () => redis.ping() }, 50);
    expect(report).toEqual({
      ok: false,
      body: {
        status: "unavailable",
        checks: { postgres: "down", redis: "ok" },
        error: "PostgreSQL is unreachable.",
      },
    });
    await expect(boundedRead(never, 50)).resolves.toBeUndefined();
  });
});
