/**
 * SSRF through the real path: a webhook set on vote-ingest, a vote cast, the dispatcher delivering.
 * DNS rebinding (the name answers a public address when the URL is set and a private one when the
 * dispatcher connects) and a redirect to a private address are both refused.
 */
import { randomBytes } from "node:crypto";
import { type AddressInfo, createServer, type Server } from "node:net";
import { createSecretBox } from "@botdir/db";
import { randomUserId, seedBot, testRedisPrefix } from "@botdir/db/testing";
import { systemClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Resolver } from "@botdir/webhook-targets";
import { createDeliveryQueue } from "../../../apps/vote-ingest/src/outbox/queue.js";
import { createDispatcherWorker } from "../../../apps/webhook-dispatcher/src/worker.js";
import { destroyAgent, send, serve } from "../../src/fuzz.js";
import { ingestOn } from "../../src/in-process.js";
import { waitFor } from "../../src/processes.js";
import { type Receiver, startReceiver } from "../../src/receivers.js";
import { attemptsOf, connectSharedRedis, deliveriesOf, useStores } from "../../src/stack.js";

const KEY = `ik_${randomBytes(16).toString("hex")}`;
const secretBox = createSecretBox(randomBytes(32));

/** public.rebind.example: the first lookup answers a public address, every later one loopback. */
const lookups: { host: string; answer: string[] }[] = [];
const resolver: Resolver = async (host) => {
  if (host !== "hooks.rebind.example")
    throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: "ENOTFOUND" });
  const answer = lookups.length === 0 ? ["93.184.215.14"] : ["127.0.0.1"];
  lookups.push({ host, answer });
  return answer;
};

const t = useStores();
t.beforeClose(destroyAgent);
let tcp: Server;
let tcpPort: number;
let tcpConnections = 0;

/** vote-ingest and a dispatcher wired together in-process on their own queue prefix. */
async function stack(allowPrivateTargets: boolean) {
  // Hash-tagged, as QUEUE_PREFIX must be: BullMQ's scripts touch several keys (one slot on a Cluster).
  const prefix = `{${testRedisPrefix()}bull}`;
  const queue = createDeliveryQueue({ db: t.db, redis: t.redis, prefix, logger: silentLogger });
  t.beforeClose(async () => {
    await queue.queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  });
  const ingest = await serve(
    ingestOn(t, {
      internalApiKey: KEY,
      deliveryQueue: queue,
      secretBox,
      allowPrivateTargets,
      webhookResolver: resolver,
    }),
  );
  t.beforeClose(() => ingest.close());
  const workerRedis = await connectSharedRedis("worker");
  t.beforeClose(() => workerRedis.disconnect());
  const worker = createDispatcherWorker(
    { db: t.db, redis: workerRedis, secrets: secretBox, clock: systemClock, logger: silentLogger },
    {
      queuePrefix: prefix,
      concurrency: 5,
      timeoutMs: 1_000,
      retryDelays: [50, 50, 50, 50],
      allowPrivateTargets,
      lockDurationMs: 2_000,
      stalledIntervalMs: 1_000,
      resolver,
    },
  );
  t.beforeClose(() => worker.close());
  await worker.waitUntilReady();
  const call = (method: string, path: string, body?: unknown) =>
    send(ingest.port, {
      method,
      path,
      headers: { authorization: KEY, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: Buffer.from(JSON.stringify(body)) }),
    });
  return { call };
}

beforeAll(async () => {
  tcp = createServer((socket) => {
    tcpConnections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
  tcpPort = (tcp.address() as AddressInfo).port;
  t.beforeClose(() => new Promise<void>((resolve) => tcp.close(() => resolve())));
});

/** The bot's first delivery, once it has ended failed. */
async function failedDelivery(botId: string) {
  const [delivery] = await waitFor(
    async () => {
      const rows = await deliveriesOf(t.db, botId);
      return rows[0]?.state === "failed" ? rows : null;
    },
    "the delivery to fail",
    20_000,
  );
  if (!delivery) throw new Error("no delivery");
  return delivery;
}

describe("SSRF through vote-ingest and the dispatcher", () => {
  it("when the webhook host answers a public address when set and loopback when the dispatcher connects (DNS rebinding), then every attempt is refused_target and no connection is made", async () => {
    const { call } = await stack(false);
    const bot = await seedBot(t.db);
    const url = `https://hooks.rebind.example:${tcpPort}/hook`;

    const set = await call("PUT", `/internal/v1/bots/${bot.id}/webhook`, { url });
    expect(set.status).toBe(200);
    expect(lookups).toEqual([{ host: "hooks.rebind.example", answer: ["93.184.215.14"] }]);

    const vote = await call("POST", "/internal/v1/votes", { bot_id: bot.id, user_id: randomUserId() });
    expect(vote.status).toBe(201);
    const delivery = await failedDelivery(bot.id);

    const attempts = await attemptsOf(t.db, delivery.id);
    expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual(
      [1, 2, 3, 4, 5].map((n) => [n, null, "refused_target"]),
    );
    // Every lookup after the URL was accepted answered loopback; none led to a connection.
    expect(lookups.slice(1).every((l) => l.answer[0] === "127.0.0.1")).toBe(true);
    expect(lookups.length).toBeGreaterThanOrEqual(6);
    expect(tcpConnections).toBe(0);
  });

  it("when the receiver answers 302 to a private address, then the redirect is not followed: the attempt is redirect and the second receiver gets nothing", async () => {
    // Private targets allowed so the first receiver can live on loopback; the redirect rule is
    // independent of the address rules.
    const { call } = await stack(true);
    const target: Receiver = await startReceiver(() => ({ status: 204 }));
    const first: Receiver = await startReceiver(() => ({
      status: 302,
      location: `http://127.0.0.1:${target.port}/internal-admin`,
    }));
    try {
      const bot = await seedBot(t.db);
      expect(
        (await call("PUT", `/internal/v1/bots/${bot.id}/webhook`, { url: first.url("/hook") })).status,
      ).toBe(200);
      expect(
        (await call("POST", "/internal/v1/votes", { bot_id: bot.id, user_id: randomUserId() })).status,
      ).toBe(201);
      const delivery = await failedDelivery(bot.id);

      const attempts = await attemptsOf(t.db, delivery.id);
      expect(attempts.map((a) => [a.statusCode, a.errorKind])).toEqual(
        Array.from({ length: 5 }, () => [302, "redirect"]),
      );
      expect(first.requests).toHaveLength(5);
      expect(target.requests).toHaveLength(0);
    } finally {
      await first.close();
      await target.close();
    }
  });
});
