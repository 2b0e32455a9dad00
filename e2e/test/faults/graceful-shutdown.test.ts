/**
 * Graceful shutdown of the real processes: on SIGTERM `/readyz` turns 503 and new connections are
 * refused at once, requests on open connections are still answered (with `Connection: close`) for
 * SHUTDOWN_DRAIN_MS (0 in the first tests), a request already in flight is answered and written,
 * and the process exits 0.
 */
import http from "node:http";
import { randomUserId, seedBot } from "@botdir/db/testing";
import { waitFor } from "../../src/processes.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({ replicas: { "webhook-dispatcher": 0 } });

/**
 * Starts a POST whose body is sent in two halves: the first half once the server has read the
 * request head (it answers `Expect: 100-continue` with 100 Continue, Node's default), the rest
 * when `finish` is called. `inFlight` resolves when the first half is written; `answer` with the
 * status and body once the answer arrives.
 */
function slowPost(base: string, path: string, headers: Record<string, string>, body: string) {
  const url = new URL(path, base);
  let finish = () => {};
  let sentHalf = () => {};
  const inFlight = new Promise<void>((resolve) => {
    sentHalf = resolve;
  });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(url, {
      method: "POST",
      headers: {
        ...headers,
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        expect: "100-continue",
      },
    });
    req.on("response", (res) => {
      let text = "";
      res.on("data", (c) => {
        text += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on("error", reject);
    const half = Math.floor(body.length / 2);
    req.on("continue", () => req.write(body.slice(0, half), () => sentHalf()));
    finish = () => req.end(body.slice(half));
  });
  return { answer, inFlight, finish: () => finish() };
}

function connects(base: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get(new URL("/nope", base), (res) => {
      res.resume();
      resolve(true);
    });
    req.on("error", () => resolve(false));
  });
}

describe("graceful shutdown", () => {
  it("when the API gets SIGTERM during a stats post, then the post is answered and stored, and the process exits 0", async () => {
    const bot = await seedBot(stack.db);
    const post = slowPost(
      stack.api.base,
      `/api/v1/bots/${bot.id}/stats`,
      { authorization: bot.token as string },
      '{"server_count":4242}',
    );
    await post.inFlight; // the server has the request head, and half of the body is sent
    stack.api.child.kill("SIGTERM");
    await waitFor(async () => !(await connects(stack.api.base)), "the API to stop accepting connections");
    post.finish();
    expect(await post.answer).toEqual({ status: 200, body: '{"success":true,"server_count":4242}' });
    expect(await stack.api.exited).toBe(0);
    const row = await stack.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(row.serverCount).toBe(4242n);
  });

  it("when vote-ingest gets SIGTERM during a vote, then the vote is answered 201 and recorded, and the process exits 0", async () => {
    const bot = await seedBot(stack.db);
    const user = randomUserId();
    const post = slowPost(
      stack.ingest.base,
      "/internal/v1/votes",
      { authorization: stack.keys.internalKey },
      JSON.stringify({ bot_id: bot.id, user_id: user }),
    );
    await post.inFlight;
    stack.ingest.child.kill("SIGTERM");
    await waitFor(
      async () => !(await connects(stack.ingest.base)),
      "vote-ingest to stop accepting connections",
    );
    post.finish();
    const answer = await post.answer;
    expect(answer.status).toBe(201);
    expect(JSON.parse(answer.body).vote.user_id).toBe(user);
    expect(await stack.ingest.exited).toBe(0);
    expect(await stack.db.prisma.vote.count({ where: { botId: bot.id, userId: user } })).toBe(1);
  });
});

/** One GET on `agent`: status, Connection header and body. */
function get(agent: http.Agent, url: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
    const req = http.get(url, { agent, headers }, (res) => {
      let body = "";
      res.on("data", (c) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
    });
    req.on("error", reject);
  });
}

describe("drain on SIGTERM", () => {
  it("when the API gets SIGTERM with SHUTDOWN_DRAIN_MS=6000, then /readyz is 503 at once and new connections are refused, requests on open connections are answered with Connection: close during the drain, and it exits 0 after it", async () => {
    // A drain long enough that a loaded machine still fits the readiness check and five requests
    // into it; the expected figures are tens of milliseconds.
    const drainMs = 6_000;
    const draining = await stack.start("api", { SHUTDOWN_DRAIN_MS: String(drainMs) });
    const bot = await seedBot(stack.db);
    const auth = { authorization: bot.token as string };
    // Ten keep-alive connections opened before the signal (ten requests at once, one each).
    const agent = new http.Agent({ keepAlive: true });
    const opened = await Promise.all(Array.from({ length: 10 }, () => get(agent, `${draining.base}/readyz`)));
    expect(opened.map((r) => r.status)).toEqual(Array(10).fill(200));

    const signalled = Date.now();
    draining.child.kill("SIGTERM");
    const notReady = await waitFor(
      async () => {
        const r = await get(agent, `${draining.base}/readyz`);
        return r.status === 503 ? r : null;
      },
      "/readyz to turn 503",
      drainMs,
      10,
    );
    // "At once": before the drain is over, while requests are still served (checked below).
    expect(Date.now() - signalled).toBeLessThan(drainMs);
    expect(JSON.parse(notReady.body)).toEqual({
      status: "unavailable",
      checks: {},
      error: "The service is shutting down.",
    });
    expect(notReady.connection).toBe("close");
    // A new connection is refused: the balancer's next attempt goes to another replica.
    expect(await connects(draining.base)).toBe(false);
    expect((await get(agent, `${draining.base}/livez`)).status).toBe(200);

    // Served during the drain on the connections opened before it, each answer closing its own.
    const answered: number[] = [];
    while (answered.length < 5) {
      const r = await get(
        agent,
        `${draining.base}/api/v1/bots/${bot.id}/check?userId=${randomUserId()}`,
        auth,
      );
      answered.push(r.status);
      expect(r.connection).toBe("close");
    }
    expect(new Set(answered)).toEqual(new Set([200]));

    expect(await draining.exited).toBe(0);
    expect(Date.now() - signalled).toBeGreaterThanOrEqual(drainMs);
    expect(draining.output()).not.toMatch(/shutdown step failed|deadline passed/);
    agent.destroy();
  });
});
