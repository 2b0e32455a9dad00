/**
 * Graceful shutdown of the real processes: on SIGTERM a request already in flight is answered and
 * written, new connections are refused, and the process exits 0.
 */
import http from "node:http";
import {
  createTestDatabase,
  randomUserId,
  seedBot,
  type TestDatabase,
  testRedisUrl,
} from "@botdir/db/testing";
import { type AppProcess, freshKeys, startApp, stopAll, waitFor } from "../../src/processes.js";
import { appEnv } from "../../src/stack.js";

const keys = freshKeys();
let t: TestDatabase;
let api: AppProcess;
let ingest: AppProcess;

beforeAll(async () => {
  t = await createTestDatabase();
  const env = appEnv({ databaseUrl: t.url, redisUrl: testRedisUrl(), keys });
  [api, ingest] = await Promise.all([startApp("api", env), startApp("vote-ingest", env)]);
}, 60_000);

afterAll(async () => {
  await stopAll();
  await t?.drop();
});

/**
 * Starts a POST whose body is sent in two halves: the first half now, the rest when `finish` is
 * called. Resolves with the status and body once the answer arrives.
 */
function slowPost(base: string, path: string, headers: Record<string, string>, body: string) {
  const url = new URL(path, base);
  let finish = () => {};
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request(url, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) },
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
    req.write(body.slice(0, half));
    finish = () => req.end(body.slice(half));
  });
  return { answer, finish: () => finish() };
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
    const bot = await seedBot(t.db);
    const post = slowPost(
      api.base,
      `/api/v1/bots/${bot.id}/stats`,
      { authorization: bot.token as string },
      '{"server_count":4242}',
    );
    await new Promise((r) => setTimeout(r, 200)); // the request is in flight, its body half sent
    api.child.kill("SIGTERM");
    await waitFor(async () => !(await connects(api.base)), "the API to stop accepting connections", 5_000);
    post.finish();
    expect(await post.answer).toEqual({ status: 200, body: '{"success":true,"server_count":4242}' });
    expect(await api.exited).toBe(0);
    const row = await t.db.prisma.bot.findUniqueOrThrow({ where: { id: bot.id } });
    expect(row.serverCount).toBe(4242n);
  });

  it("when vote-ingest gets SIGTERM during a vote, then the vote is answered 201 and recorded, and the process exits 0", async () => {
    const bot = await seedBot(t.db);
    const user = randomUserId();
    const post = slowPost(
      ingest.base,
      "/internal/v1/votes",
      { authorization: keys.internalKey },
      JSON.stringify({ bot_id: bot.id, user_id: user }),
    );
    await new Promise((r) => setTimeout(r, 200));
    ingest.child.kill("SIGTERM");
    await waitFor(
      async () => !(await connects(ingest.base)),
      "vote-ingest to stop accepting connections",
      5_000,
    );
    post.finish();
    const answer = await post.answer;
    expect(answer.status).toBe(201);
    expect(JSON.parse(answer.body).vote.user_id).toBe(user);
    expect(await ingest.exited).toBe(0);
    expect(await t.db.prisma.vote.count({ where: { botId: bot.id, userId: user } })).toBe(1);
  });
});
