/** Shared fixtures of the dispatcher's integration tests. */
import { randomBytes, randomUUID } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createSecretBox, type Db, type SecretBox } from "@botdir/db";
import {
  createTestDatabase,
  randomUserId,
  type SeededBot,
  seedBot,
  type TestDatabase,
  testRedisPrefix,
  testRedisUrl,
  useForFile,
} from "@botdir/db/testing";
import { deliveryBatchJob, deliveryJob, QUEUES } from "@botdir/schema";
import { type Clock, type Logger, type ManualClock, systemClock } from "@botdir/service-kit";
import { silentLogger, waitFor } from "@botdir/service-kit/testing";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { createDeliverHandler, type DeliverDeps } from "../src/deliver.handler.js";
import type { ClaimOptions, RecordInput } from "../src/deliveries.js";
import type { AttemptOutcome } from "../src/http-client.js";
import { createDispatcherMetrics, type DispatcherMetrics } from "../src/metrics.js";
import { createDispatcherWorker, type DispatcherConfig, type DispatcherWorker } from "../src/worker.js";

export const encryptionKey = randomBytes(32);
export const secretBox: SecretBox = createSecretBox(encryptionKey);

/** Short delays and timeout so a whole five-attempt run takes well under a second. */
export function testConfig(prefix: string, overrides: Partial<DispatcherConfig> = {}): DispatcherConfig {
  return {
    queuePrefix: prefix,
    concurrency: 5,
    timeoutMs: 300,
    retryDelays: [50, 50, 50, 50],
    allowPrivateTargets: true,
    lockDurationMs: 2_000,
    stalledIntervalMs: 1_000,
    // As in production (DISPATCHER_DB_BATCH_MAX): concurrent attempts share claim/record statements.
    dbBatchMax: 50,
    ...overrides,
  };
}

export function workerRedis(): Redis {
  return new Redis(testRedisUrl(), { maxRetriesPerRequest: null, enableAutoPipelining: false });
}

export interface StartedWorker {
  worker: DispatcherWorker;
  /** The worker's own Redis connection. */
  redis: Redis;
  /** Its metrics registry: one per replica, as main.ts wires it. */
  metrics: DispatcherMetrics;
  close(): Promise<void>;
}

/** A dispatcher worker as main.ts starts one, reporting to `metrics` (a registry of its own by default). */
export async function startWorker(
  db: Db,
  config: DispatcherConfig,
  logger: Logger = silentLogger,
  metrics: DispatcherMetrics = createDispatcherMetrics(),
): Promise<StartedWorker> {
  const redis = workerRedis();
  const worker = createDispatcherWorker(
    { db, redis, secrets: secretBox, clock: systemClock, logger, metrics },
    config,
  );
  await worker.waitUntilReady();
  let closed: Promise<void> | undefined;
  return {
    worker,
    redis,
    metrics,
    close() {
      // Once: a harness closes every worker it started, also one a test closed already.
      closed ??= worker.close().then(() => redis.disconnect());
      return closed;
    },
  };
}

export function openQueue(prefix: string): { queue: Queue; close(): Promise<void> } {
  const redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: null });
  const queue = new Queue(QUEUES.webhookDeliveries, { connection: redis, prefix });
  return {
    queue,
    async close() {
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
      redis.disconnect();
    },
  };
}

/**
 * Hands a delivery to the queue exactly as vote-ingest does (the fixed job contract); without
 * `botId` the job is one handed off before jobs named their bot.
 */
export async function handOff(
  queue: Queue,
  delivery: { id: string; botId?: string; attemptsMade?: number; nextAttemptAt: Date },
  now = new Date(),
): Promise<void> {
  const handOff = {
    id: delivery.id,
    ...(delivery.botId === undefined ? {} : { botId: delivery.botId }),
    attemptsMade: delivery.attemptsMade ?? 0,
    nextAttemptAt: delivery.nextAttemptAt,
  };
  const { name, data, opts } = deliveryJob(handOff, now);
  await queue.add(name, data, opts);
}

/**
 * Hands deliveries (first attempts, due now) to the queue as one `vote.batch` job, as vote-ingest
 * does with the hand-offs of one event-loop turn. Resolves with the job's id (BullMQ names it).
 */
export async function handOffBatch(
  queue: Queue,
  deliveries: { id: string; botId?: string; traceparent?: string }[],
): Promise<string> {
  const { name, data, opts } = deliveryBatchJob(deliveries);
  const job = await queue.add(name, data, opts);
  if (!job.id) throw new Error("BullMQ gave the batch job no id");
  return job.id;
}

export async function configureWebhook(db: Db, botId: string, url: string | null, secret: string | null) {
  await db.prisma.bot.update({
    where: { id: botId },
    data: { webhookUrl: url, webhookSecretEncrypted: secret === null ? null : secretBox.encrypt(secret) },
  });
}

export interface SeededDelivery {
  id: string;
  botId: string;
  userId: string;
  votedAt: Date;
  nextAttemptAt: Date;
}

/** A vote_log row and its pending webhook_deliveries row, as vote-ingest writes them. */
export async function seedDelivery(
  db: Db,
  botId: string,
  options: { nextAttemptAt?: Date; votedAt?: Date } = {},
): Promise<SeededDelivery> {
  const userId = randomUserId();
  const votedAt = options.votedAt ?? new Date();
  const nextAttemptAt = options.nextAttemptAt ?? votedAt;
  const vote = await db.prisma.vote.create({ data: { botId, userId, votedAt } });
  const id = randomUUID();
  await db.prisma.delivery.create({ data: { id, botId, voteId: vote.id, nextAttemptAt } });
  return { id, botId, userId, votedAt, nextAttemptAt };
}

export async function deliveryRow(db: Db, id: string) {
  return db.prisma.delivery.findUniqueOrThrow({ where: { id } });
}

export async function attemptRows(db: Db, deliveryId: string) {
  return db.prisma.attempt.findMany({ where: { deliveryId }, orderBy: { attemptNumber: "asc" } });
}

export async function waitForState(db: Db, id: string, state: "delivered" | "failed", timeoutMs?: number) {
  return waitFor(
    async () => {
      const row = await deliveryRow(db, id);
      return row.state === state ? row : null;
    },
    `delivery ${id} to be ${state}`,
    timeoutMs,
  );
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The raw bytes read off the wire. */
  body: Buffer;
  at: number;
}

/** How the receiver answers request number `n` (1-based, counted per path). */
export type Reply = { status: number; location?: string; delayMs?: number } | "hang";

export interface Receiver {
  url(path?: string): string;
  requests: ReceivedRequest[];
  forPath(path: string): ReceivedRequest[];
  close(): Promise<void>;
}

/** A real HTTP receiver on 127.0.0.1 and an ephemeral port. */
export async function startReceiver(reply: (req: ReceivedRequest, n: number) => Reply): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const hanging = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const received: ReceivedRequest = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: Date.now(),
      };
      requests.push(received);
      const n = requests.filter((r) => r.path === received.path).length;
      const answer = reply(received, n);
      if (answer === "hang") {
        hanging.add(res);
        return;
      }
      const send = () => {
        if (answer.location) res.setHeader("Location", answer.location);
        res.statusCode = answer.status;
        res.end();
      };
      if (answer.delayMs) setTimeout(send, answer.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    requests,
    forPath: (path) => requests.filter((r) => r.path === path),
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Claim-protocol fixtures shared by the claim tests: retry delays, lease, outcomes, options. */
export const DELAYS = [60_000, 300_000, 1_800_000, 7_200_000];
export const LEASE_MS = 40_000;
export const ok: AttemptOutcome = { ok: true, statusCode: 204, errorKind: null, durationMs: 12 };
export const fail: AttemptOutcome = { ok: false, statusCode: 500, errorKind: "http_status", durationMs: 8 };

export function claimOptions(clock: ManualClock): ClaimOptions {
  return {
    now: clock.now(),
    leaseMs: LEASE_MS,
    earlySlackMs: 250,
    retryDelays: DELAYS,
    decryptSecret: (s) => secretBox.decrypt(s),
  };
}

/** What a claim's holder records when its attempt of `delivery` ended in `outcome`, at the clock's now. */
export function recordInput(
  delivery: { id: string; botId: string },
  claim: { attemptNumber: number; leaseUntil: Date },
  outcome: AttemptOutcome,
  clock: Clock,
): RecordInput {
  return {
    deliveryId: delivery.id,
    botId: delivery.botId,
    attemptNumber: claim.attemptNumber,
    leaseUntil: claim.leaseUntil,
    attemptedAt: clock.now(),
    outcome,
    now: clock.now(),
    retryDelays: DELAYS,
  };
}

/** A seeded delivery as handOff takes it. */
type HandOff = Parameters<typeof handOff>[1];

/** A bot with a webhook, and deliveries of its votes. */
export interface WebhookBot {
  bot: SeededBot;
  secret: string;
  /** A pending delivery of a vote cast now (by the bot's clock), due at once unless told otherwise. */
  newDelivery(options?: { nextAttemptAt?: Date }): Promise<SeededDelivery>;
}

/**
 * One test database's delivery rows: seeding bots, webhooks and deliveries as vote-ingest writes
 * them, and reading what the dispatcher made of them. The worker harness has all of it too.
 */
export interface DeliveryDatabase {
  t: TestDatabase;
  db: Db;
  /** An approved bot whose webhook is `url` (with `secret`); its votes are cast at `clock`'s now. */
  webhookBot(url: string, options?: { secret?: string; clock?: Clock }): Promise<WebhookBot>;
  /** An approved bot whose webhook points at `url`, and one pending delivery of it. */
  arrange(
    url: string,
    options?: { secret?: string; nextAttemptAt?: Date },
  ): Promise<{ bot: SeededBot; delivery: SeededDelivery; secret: string }>;
  seedDelivery(botId: string, options?: { nextAttemptAt?: Date; votedAt?: Date }): Promise<SeededDelivery>;
  configureWebhook(botId: string, url: string | null, secret: string | null): Promise<void>;
  row(id: string): ReturnType<typeof deliveryRow>;
  attempts(deliveryId: string): ReturnType<typeof attemptRows>;
  waitForState(id: string, state: "delivered" | "failed", timeoutMs?: number): ReturnType<typeof deliveryRow>;
  /**
   * The deliver handler on this database, driven by hand with `clock`: the claim fixtures' retry
   * delays and lease, nothing logged; `deps` gives the sender and replaces any of the rest.
   */
  handler(
    clock: Clock,
    deps: Pick<DeliverDeps, "send"> & Partial<DeliverDeps>,
  ): ReturnType<typeof createDeliverHandler>;
}

export function deliveryDatabase(t: TestDatabase): DeliveryDatabase {
  const db = t.db;
  const webhookBot: DeliveryDatabase["webhookBot"] = async (url, options = {}) => {
    const secret = options.secret ?? "whsec_test_secret";
    const clock = options.clock ?? systemClock;
    const bot = await seedBot(db);
    await configureWebhook(db, bot.id, url, secret);
    return {
      bot,
      secret,
      newDelivery: (delivery = {}) => seedDelivery(db, bot.id, { votedAt: clock.now(), ...delivery }),
    };
  };
  return {
    t,
    db,
    webhookBot,
    async arrange(url, options = {}) {
      const { bot, secret, newDelivery } = await webhookBot(url, options);
      const delivery = await newDelivery(
        options.nextAttemptAt ? { nextAttemptAt: options.nextAttemptAt } : {},
      );
      return { bot, delivery, secret };
    },
    seedDelivery: (botId, options) => seedDelivery(db, botId, options),
    configureWebhook: (botId, url, secret) => configureWebhook(db, botId, url, secret),
    row: (id) => deliveryRow(db, id),
    attempts: (deliveryId) => attemptRows(db, deliveryId),
    waitForState: (id, state, timeoutMs) => waitForState(db, id, state, timeoutMs),
    handler: (clock, deps) =>
      createDeliverHandler({
        db,
        secrets: secretBox,
        clock,
        logger: silentLogger,
        retryDelays: DELAYS,
        leaseMs: LEASE_MS,
        ...deps,
      }),
  };
}

/** A DeliveryDatabase of this test file's own: created before its tests, dropped after them. */
export function useDeliveryDatabase(): DeliveryDatabase {
  return useForFile(
    "the delivery database",
    async () => deliveryDatabase(await createTestDatabase()),
    (d) => d.t.drop(),
  );
}

/**
 * The dispatcher's worker harness: a database and a queue prefix of the test file's own, the
 * queue, dispatcher workers consuming it (one by default), receivers, and one teardown (`close`).
 */
export interface DispatcherHarness extends DeliveryDatabase {
  prefix: string;
  queue: Queue;
  /** The workers, in start order (`worker` is the first). */
  workers: StartedWorker[];
  worker: StartedWorker;
  /** Starts a receiver that `close` closes. */
  receiver(reply?: (req: ReceivedRequest, n: number) => Reply): Promise<Receiver>;
  /** Starts one more worker on the queue (`testConfig` plus `overrides`), closed by `close`. */
  addWorker(overrides?: Partial<DispatcherConfig>, logger?: Logger): Promise<StartedWorker>;
  handOff(delivery: HandOff, now?: Date): Promise<void>;
  /** One `vote.batch` job of these deliveries (each with its vote's context, if given); resolves with its job id. */
  handOffBatch(deliveries: { id: string; botId?: string; traceparent?: string }[]): Promise<string>;
  /** Waits until the job of delivery `id` has left the queue. */
  jobGone(id: string): Promise<void>;
  close(): Promise<void>;
}

export async function startDispatcherHarness(
  options: { workers?: Partial<DispatcherConfig>[]; poolMax?: number; logger?: Logger } = {},
): Promise<DispatcherHarness> {
  const t = await createTestDatabase(options.poolMax === undefined ? {} : { poolMax: options.poolMax });
  const prefix = testRedisPrefix();
  const opened = openQueue(prefix);
  const workers: StartedWorker[] = [];
  const receivers: Receiver[] = [];
  const addWorker = async (overrides: Partial<DispatcherConfig> = {}, logger = options.logger) => {
    // Each replica a registry of its own, as in production, reading the depth of the harness's queue.
    const metrics = createDispatcherMetrics({ queue: opened.queue });
    const started = await startWorker(t.db, testConfig(prefix, overrides), logger, metrics);
    workers.push(started);
    return started;
  };
  for (const overrides of options.workers ?? [{}]) await addWorker(overrides);
  const harness: DispatcherHarness = {
    ...deliveryDatabase(t),
    prefix,
    queue: opened.queue,
    workers,
    get worker() {
      const first = workers[0];
      if (!first) throw new Error("the harness runs no worker");
      return first;
    },
    async receiver(reply = () => ({ status: 204 })) {
      const started = await startReceiver(reply);
      receivers.push(started);
      return started;
    },
    addWorker,
    handOff: (delivery, now) => handOff(opened.queue, delivery, now),
    handOffBatch: (deliveries) => handOffBatch(opened.queue, deliveries),
    async jobGone(id) {
      await waitFor(async () => (await opened.queue.getJob(id)) === undefined, `job ${id} to be removed`);
    },
    async close() {
      await Promise.all(workers.map((w) => w.close()));
      await opened.close();
      await Promise.all(receivers.map((r) => r.close()));
      await t.drop();
    },
  };
  return harness;
}
