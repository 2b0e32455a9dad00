/** Shared fixtures of the dispatcher's integration tests. */
import { randomBytes, randomUUID } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createSecretBox, type Db, type SecretBox } from "@botdir/db";
import { randomUserId, testRedisUrl } from "@botdir/db/testing";
import { deliveryJobData, deliveryJobOptions, type JOBS, QUEUES } from "@botdir/schema";
import { type Logger, type ManualClock, systemClock } from "@botdir/service-kit";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import type { ClaimOptions } from "../src/deliveries.js";
import type { AttemptOutcome } from "../src/http-client.js";
import { createDispatcherWorker, type DispatcherConfig, type DispatcherWorker } from "../src/worker.js";

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

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
  close(): Promise<void>;
}

export async function startWorker(
  db: Db,
  config: DispatcherConfig,
  logger: Logger = silentLogger,
): Promise<StartedWorker> {
  const redis = workerRedis();
  const worker = createDispatcherWorker(
    { db, redis, secrets: secretBox, clock: systemClock, logger },
    config,
  );
  await worker.waitUntilReady();
  return {
    worker,
    async close() {
      await worker.close();
      redis.disconnect();
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
  await queue.add(
    "vote.create" satisfies keyof typeof JOBS,
    deliveryJobData(handOff),
    deliveryJobOptions(handOff, now),
  );
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

export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false>,
  what: string,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
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
