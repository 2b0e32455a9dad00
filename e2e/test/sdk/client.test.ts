/**
 * @botdir/sdk's client and autoposter against the real apps (child processes on a database and a
 * Redis of their own): every method, its errors, its retries (through a scripted proxy in front of
 * the real API for 503, 429 and a dropped connection; a real over-limit 429 too), and the
 * autoposter's posts and its stop on 401.
 */

import { randomUserId, seedBot } from "@botdir/db/testing";
import {
  ApiError,
  type AutoposterOptions,
  BotDirClient,
  type BotDirClientOptions,
  startAutoposter,
} from "@botdir/sdk";
import { waitFor } from "../../src/processes.js";
import { type ScriptedProxy, startScriptedProxy } from "../../src/scripted-proxy.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({ privateRedis: true });
let proxy: ScriptedProxy;

beforeAll(async () => {
  proxy = await startScriptedProxy(stack.api.base);
});

afterAll(async () => {
  await proxy?.close();
});

/** Quick retries so that the tests do not wait for the production backoff. */
function client(bot: { id: string; token: string | null }, options: Partial<BotDirClientOptions> = {}) {
  return new BotDirClient({
    baseUrl: stack.api.base,
    token: bot.token ?? "",
    botId: bot.id,
    retry: { baseDelayMs: 20, maxDelayMs: 100 },
    ...options,
  });
}

const rowOf = (id: string) => stack.db.prisma.bot.findUniqueOrThrow({ where: { id } });
const requestsTo = (botId: string) => proxy.requests.filter((r) => r.path.includes(botId));

async function errorOf(promise: Promise<unknown>): Promise<ApiError> {
  const error = await promise.then(
    () => new Error("resolved"),
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw error;
  return error;
}

describe("BotDirClient against the real API", () => {
  it("when stats are posted for the bot and then per shard, then the stored server_count is the total and then the shards' sum", async () => {
    const bot = await stack.knownBot();
    const sdk = client(bot);
    expect(await sdk.postStats({ serverCount: 1482 })).toEqual({ success: true, server_count: 1482 });
    expect((await rowOf(bot.id)).serverCount).toBe(1482n);
    await sdk.postStats({ serverCount: 10, shardId: 0, shardCount: 2 });
    expect(await sdk.postStats({ serverCount: 5, shardId: 1, shardCount: 2 })).toEqual({
      success: true,
      server_count: 5,
    });
    expect((await rowOf(bot.id)).serverCount).toBe(15n);
    await sdk.postStats({ serverCount: 0, shards: [3, 4] });
    expect((await rowOf(bot.id)).serverCount).toBe(7n);
  });

  it("when commands are put, then the list is replaced (duplicates dropped) and an empty array clears it", async () => {
    const bot = await stack.knownBot();
    const sdk = client(bot);
    const commands = [
      { name: "ping", description: "Checks the latency" },
      { name: "help", description: "Lists the commands", options: [{ type: 3, name: "topic" }] },
      { name: "ping", description: "A duplicate" },
    ];
    expect(await sdk.putCommands(commands)).toEqual({ success: true, count: 2 });
    expect((await rowOf(bot.id)).commands).toEqual(commands.slice(0, 2));
    expect(await sdk.putCommands([])).toEqual({ success: true, count: 0 });
    expect((await rowOf(bot.id)).commands).toEqual([]);
  });

  it("when a user voted on the site, then check, hasVoted and votes report that vote", async () => {
    const bot = await stack.knownBot();
    const sdk = client(bot);
    const voter = randomUserId();
    const cast = await stack.vote(bot.id, voter);
    expect(cast.status).toBe(201);
    const votedAt = (cast.body as { vote: { voted_at: string } }).vote.voted_at;

    expect(await sdk.check(voter)).toEqual({
      voted: 1,
      hasVoted: true,
      votedAt,
      nextVoteAt: new Date(Date.parse(votedAt) + 12 * 3_600_000).toISOString(),
    });
    expect(await sdk.hasVoted(voter)).toBe(true);
    // The base other directories' clients are given works too.
    expect(await client(bot, { baseUrl: `${stack.api.base}/api/v1/` }).hasVoted(voter)).toBe(true);
    expect(await sdk.hasVoted(randomUserId())).toBe(false);
    expect(await sdk.votes({ limit: 5 })).toEqual([{ user_id: voter, voted_at: votedAt }]);
  });

  it("when votesSince pages through 250 votes, then every vote at or after the date comes once, oldest first, in three requests", async () => {
    const bot = await stack.knownBot();
    const start = Date.now() - 3_600_000;
    const log = Array.from({ length: 270 }, (_, i) => ({
      botId: bot.id,
      userId: randomUserId(),
      votedAt: new Date(start + i * 1_000),
    }));
    await stack.db.prisma.vote.createMany({ data: log });
    const since = log[20]!.votedAt;

    const seen = [];
    for await (const vote of client(bot, { baseUrl: proxy.base }).votesSince(since)) seen.push(vote);

    expect(seen).toEqual(
      log.slice(20).map((v) => ({ user_id: v.userId, voted_at: v.votedAt.toISOString() })),
    );
    expect(requestsTo(bot.id).map((r) => r.answer)).toEqual([200, 200, 200]);
  });

  it("when a delivery was delivered, then webhookDeliveries lists it and redeliver sends it again with the same id", async () => {
    const bot = await stack.webhookBot(stack.receiver.url("/deliveries"));
    const sdk = client(bot);
    expect((await stack.vote(bot.id, randomUserId())).status).toBe(201);
    // A deadline far above the milliseconds a delivery takes: the test is about the log and the
    // redelivery, and in a distributed run (PgBouncer, Redis Cluster) the machine is at its busiest.
    const delivered = await waitFor(
      async () => {
        const [d] = await stack.deliveries(bot.id);
        return d?.state === "delivered" ? d : null;
      },
      "the first delivery",
      60_000,
    );

    const attempts = await sdk.webhookDeliveries();
    expect(attempts).toEqual([
      expect.objectContaining({
        deliveryId: delivered.id,
        attempt: 1,
        series: 0,
        statusCode: 204,
        outcome: "delivered",
        event: "vote.create",
      }),
    ]);
    expect(await sdk.redeliver(delivered.id)).toEqual({
      deliveryId: delivered.id,
      state: "pending",
      series: 1,
    });
    await waitFor(
      () => stack.receiver.forPath("/deliveries").length === 2,
      "the redelivery to arrive",
      30_000,
    );
    expect(stack.receiver.forPath("/deliveries").map((r) => r.headers["x-webhook-delivery"])).toEqual([
      delivered.id,
      delivered.id,
    ]);
  }, 120_000);

  it("when the path id is another bot's, then ApiError 404 with the API's sentence", async () => {
    const [bot, other] = await Promise.all([stack.knownBot(), seedBot(stack.db)]);
    const error = await errorOf(client({ id: other.id, token: bot.token }).check(randomUserId()));
    expect([error.status, error.message, error.retryAfter]).toEqual([404, "Bot not found.", undefined]);
  });

  it("when the API answers 400 or 401, then the client does not retry", async () => {
    const bot = await stack.knownBot();
    const viaProxy = client(bot, { baseUrl: proxy.base });
    const tooLong = await errorOf(viaProxy.putCommands([{ name: "x".repeat(33), description: "d" }]));
    expect([tooLong.status, tooLong.message]).toEqual([
      400,
      "commands[0].name must be 1 to 32 characters long.",
    ]);
    const unknown = await errorOf(
      client({ ...bot, token: "not-a-token" }, { baseUrl: proxy.base }).postStats({ serverCount: 1 }),
    );
    expect([unknown.status, unknown.message]).toEqual([401, "Invalid token."]);
    expect(requestsTo(bot.id).map((r) => [r.method, r.answer])).toEqual([
      ["PUT", 400],
      ["POST", 401],
    ]);
  });

  it("when the first answer is a 503, then the client backs off and the next, real answer succeeds", async () => {
    const bot = await stack.knownBot();
    proxy.script({ status: 503, body: { error: "The service is unavailable." } });
    expect(await client(bot, { baseUrl: proxy.base }).postStats({ serverCount: 503 })).toEqual({
      success: true,
      server_count: 503,
    });
    expect(requestsTo(bot.id).map((r) => r.answer)).toEqual([503, 200]);
    expect((await rowOf(bot.id)).serverCount).toBe(503n);
  });

  it("when the first answer is a 429 with retryAfter 1, then the client waits that second and succeeds", async () => {
    const bot = await stack.knownBot();
    proxy.script({
      status: 429,
      body: { error: "Rate limit exceeded.", retryAfter: 1 },
      headers: { "retry-after": "1" },
    });
    const started = Date.now();
    expect(await client(bot, { baseUrl: proxy.base }).postStats({ serverCount: 429 })).toMatchObject({
      server_count: 429,
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(990);
    expect(requestsTo(bot.id).map((r) => r.answer)).toEqual([429, 200]);
  });

  it("when the connection drops before an answer, then the client retries it", async () => {
    const bot = await stack.knownBot();
    proxy.script("reset");
    expect(await client(bot, { baseUrl: proxy.base }).hasVoted(randomUserId())).toBe(false);
    expect(requestsTo(bot.id).map((r) => r.answer)).toEqual(["reset", 200]);
  });

  it("when retry is false, then a 503 is thrown at once", async () => {
    const bot = await stack.knownBot();
    proxy.script({ status: 503, body: { error: "The service is unavailable." } });
    const error = await errorOf(client(bot, { baseUrl: proxy.base, retry: false }).votes());
    expect([error.status, error.message]).toEqual([503, "The service is unavailable."]);
    expect(requestsTo(bot.id).map((r) => r.answer)).toEqual([503]);
  });

  it("when the real limit is exceeded and its wait is beyond the bound, then ApiError 429 carries retryAfter", async () => {
    const bot = await stack.knownBot();
    const sdk = client(bot, { retry: { maxRetryAfterMs: 0 } });
    for (let i = 0; i < 10; i++) await sdk.putCommands([]); // PUT /commands: 10 a minute
    const error = await errorOf(sdk.putCommands([]));
    expect([error.status, error.message]).toEqual([429, "Rate limit exceeded."]);
    expect(error.retryAfter).toBeGreaterThanOrEqual(1);
    expect(error.retryAfter).toBeLessThanOrEqual(60);
  });
});

/** Runs an autoposter while `meanwhile` waits for what it does, stops it, and returns the errors it reported. */
async function errorsWhilePosting(
  options: Omit<AutoposterOptions, "onError">,
  meanwhile: () => Promise<unknown>,
): Promise<unknown[]> {
  const errors: unknown[] = [];
  const poster = startAutoposter({ ...options, onError: (e) => errors.push(e) });
  try {
    await meanwhile();
  } finally {
    poster.stop();
  }
  return errors;
}

describe("startAutoposter against the real API", () => {
  it("when it runs, then it posts at once and again every interval: the stored server_count follows", async () => {
    const bot = await stack.knownBot();
    let count = 100;
    const errors = await errorsWhilePosting(
      { client: client(bot), stats: () => ({ serverCount: ++count }), intervalMs: 1_000 },
      async () => {
        await waitFor(async () => (await rowOf(bot.id)).serverCount === 101n, "the first post");
        await waitFor(async () => ((await rowOf(bot.id)).serverCount ?? 0n) >= 103n, "two more posts");
      },
    );
    expect(errors).toEqual([]);
  });

  it("when the token is refused (401), then it stops for good while a poster with a good token goes on", async () => {
    const [bad, good] = await Promise.all([seedBot(stack.db), stack.knownBot()]);
    const errors: unknown[] = [];
    let goodPosts = 0;
    const refused = startAutoposter({
      client: client({ id: bad.id, token: "replaced-token" }, { baseUrl: proxy.base }),
      stats: () => ({ serverCount: 1 }),
      intervalMs: 1_000,
      onError: (e) => errors.push(e),
    });
    // The sentinel: the same interval through the same proxy, so the refused poster had time to post again.
    const sentinel = startAutoposter({
      client: client(good, { baseUrl: proxy.base }),
      stats: () => ({ serverCount: 2 }),
      intervalMs: 1_000,
      onPost: () => goodPosts++,
    });
    try {
      await waitFor(() => errors.length === 1, "the 401");
      const after401 = goodPosts;
      await waitFor(() => goodPosts >= after401 + 5, "five more posts of the sentinel", 30_000);
    } finally {
      sentinel.stop();
      refused.stop();
    }
    expect(requestsTo(bad.id).map((r) => r.answer)).toEqual([401]);
    expect(errors).toEqual([expect.objectContaining({ status: 401 })]);
  });

  it("when a 429's retryAfter is beyond the client's bound, then the next post waits for the window, not the interval", async () => {
    const bot = await stack.knownBot();
    let posted = false;
    proxy.script({ status: 429, body: { error: "Rate limit exceeded.", retryAfter: 2 } });
    const errors = await errorsWhilePosting(
      {
        client: client(bot, { baseUrl: proxy.base, retry: { maxRetryAfterMs: 0 } }),
        stats: () => ({ serverCount: 42 }),
        intervalMs: 1_000,
        onPost: () => {
          posted = true;
        },
      },
      // The poster's own signal: the answer has passed the proxy (the row alone may be written first).
      () => waitFor(() => posted, "the post after the window"),
    );
    const [limited, next] = requestsTo(bot.id);
    expect([limited?.answer, next?.answer]).toEqual([429, 200]);
    expect(next!.at - limited!.at).toBeGreaterThanOrEqual(1_990);
    expect(errors).toEqual([expect.objectContaining({ status: 429, retryAfter: 2 })]);
    expect((await rowOf(bot.id)).serverCount).toBe(42n);
  });

  it("when stats() throws, then onError gets it and the poster carries on", async () => {
    const bot = await stack.knownBot();
    let calls = 0;
    const errors = await errorsWhilePosting(
      {
        client: client(bot),
        stats: () => {
          calls++;
          if (calls === 1) throw new Error("shards not ready");
          return { serverCount: 77 };
        },
        intervalMs: 1_000,
      },
      () => waitFor(async () => (await rowOf(bot.id)).serverCount === 77n, "a post after the failure"),
    );
    expect(errors).toEqual([new Error("shards not ready")]);
  });
});
