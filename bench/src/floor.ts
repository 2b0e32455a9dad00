/**
 * The floor: a bare Express 5 app answering the benchmarked routes with constant JSON, parsing
 * bodies the same way, and paying what every production request pays regardless of its logic: a
 * request id and one JSON log line per request through pino at the apps' log level (the same
 * fields as service-kit's requestContext), and `/votes` answers 100 rows like ours. Whatever our
 * service costs on top of this is ours.
 *
 * With FLOOR_DATABASE_URL and FLOOR_REDIS_URL set it is the **floor with its I/O**: `/check` and
 * `/stats` also do the least a correct answer needs, with the design card's components and batched
 * per event-loop turn like ours (@botdir/batcher, 4 batches in flight, 64 keys each): the token's
 * SHA-256 (hashToken), one Redis round trip per batch counting each token's request (a pipeline of
 * INCR on a fixed 10-second window's key, never expired: cheaper than a real limiter) and one
 * PostgreSQL statement per batch through node-postgres: `/check` reads the token's bot and the
 * user's window with the API's own statement (findVoteWindows) and answers with its toVoteCheck,
 * `/stats` writes the bot's row with a bare `UPDATE … FROM unnest(…)` (no shards, no lock
 * ordering). Whatever ours costs on top of that is what authentication, limits, validation and
 * shards add.
 */
import { randomUUID } from "node:crypto";
import { createBatcher } from "@botdir/batcher";
import { hashToken } from "@botdir/db";
import express, { type NextFunction, type Request, type Response } from "express";
import { Redis } from "ioredis";
import pg from "pg";
import { pino } from "pino";
import { findVoteWindows, toVoteCheck, type VoteWindowKey } from "../../apps/api/src/services/bots.js";

const port = Number(process.argv[2] ?? 0);
const logger = pino({
  name: "floor",
  level: process.env.LOG_LEVEL ?? "info",
  redact: { paths: ["req.headers.authorization"], censor: "[redacted]" },
});
const app = express();
app.disable("x-powered-by");
app.set("etag", false);
const json = express.json({ limit: "512kb" });
const votedAt = new Date().toISOString();
const hundredVotes = Array.from({ length: 100 }, (_, i) => ({
  user_id: `${200000000000000000n + BigInt(i)}`,
  voted_at: new Date(Date.now() - i * 60_000).toISOString(),
}));

app.use((req: Request, res: Response, next: NextFunction) => {
  const start = process.hrtime.bigint();
  const reqId = randomUUID();
  res.setHeader("X-Request-Id", reqId);
  res.on("finish", () => {
    if (!logger.isLevelEnabled("info")) return;
    const url = req.originalUrl;
    const q = url.indexOf("?");
    logger.info(
      {
        reqId,
        method: req.method,
        route: req.route?.path ?? "unmatched",
        path: q === -1 ? url : url.slice(0, q),
        status: res.statusCode,
        ms: Math.round(Number(process.hrtime.bigint() - start) / 1e5) / 10,
      },
      "request",
    );
  });
  next();
});
const io = withIo(process.env.FLOOR_DATABASE_URL, process.env.FLOOR_REDIS_URL);
if (io) {
  app.get("/api/v1/bots/:id/check", async (req, res) => {
    const tokenHash = hashToken(req.headers.authorization ?? "");
    const [count, row] = await Promise.all([
      io.count(`check:${tokenHash}`),
      io.check({ tokenHash, userId: String(req.query.userId) }),
    ]);
    if (row === null) res.status(401).json({ error: "Unauthorized" });
    else if (count > 600) res.status(429).json({ error: "Too many requests" });
    else res.json(toVoteCheck(row.votedAt, new Date()));
  });
  app.post("/api/v1/bots/:id/stats", json, async (req, res) => {
    const tokenHash = hashToken(req.headers.authorization ?? "");
    const serverCount = Number((req.body as { server_count?: unknown }).server_count);
    const [count, written] = await Promise.all([
      io.count(`stats:${tokenHash}`),
      io.stats({ tokenHash, botId: String(req.params.id), serverCount }),
    ]);
    if (!written) res.status(401).json({ error: "Unauthorized" });
    else if (count > 60) res.status(429).json({ error: "Too many requests" });
    else res.json({ success: true, server_count: serverCount });
  });
} else {
  app.get("/api/v1/bots/:id/check", (_req, res) => {
    res.json({ voted: 1, hasVoted: true, votedAt, nextVoteAt: votedAt });
  });
  app.post("/api/v1/bots/:id/stats", json, (_req, res) => {
    res.json({ success: true, server_count: 1 });
  });
}
app.put("/api/v1/bots/:id/commands", json, (_req, res) => {
  res.json({ success: true, count: 100 });
});
app.get("/api/v1/bots/:id/votes", (_req, res) => {
  res.json({ votes: hundredVotes });
});
app.post("/internal/v1/votes", json, (_req, res) => {
  res.status(201).json({ vote: { user_id: "1", voted_at: votedAt }, nextVoteAt: votedAt });
});
app.get("/health", (_req, res) => {
  res.json({ status: "ok" });
});

const server = app.listen(port, "127.0.0.1", () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === "object" && address ? address.port : port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));

/** The floor's I/O for `/check` and `/stats` (see the header); null without both URLs. */
function withIo(databaseUrl: string | undefined, redisUrl: string | undefined) {
  if (!databaseUrl || !redisUrl) return null;
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 8 });
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const limits = { maxInFlight: 4, maxBatch: 64 };
  const count = createBatcher<string, number>({
    ...limits,
    isolateFailures: false,
    run: async (keys) => {
      const window = Math.floor(Date.now() / 10_000);
      const pipeline = redis.pipeline();
      for (const key of keys) pipeline.incr(`floor:${key}:${window}`);
      const replies = (await pipeline.exec()) ?? [];
      return replies.map(([error, n]) => (error ? 0 : Number(n)));
    },
  });
  const check = createBatcher({
    ...limits,
    run: (keys: readonly VoteWindowKey[]) => findVoteWindows({ pool }, keys),
  });
  const stats = createBatcher<{ tokenHash: string; botId: string; serverCount: number }, boolean>({
    ...limits,
    run: async (keys) => {
      const { rows } = await pool.query<{ i: string }>({
        name: "floor.stats",
        text: `UPDATE bots b SET server_count = q.server_count, checked_in_at = now(), updated_at = now()
                 FROM unnest($1::char(64)[], $2::varchar[], $3::bigint[])
                      WITH ORDINALITY AS q(token_hash, bot_id, server_count, i)
                WHERE b.token_hash = q.token_hash AND b.id = q.bot_id AND b.status = 'approved'
            RETURNING q.i`,
        values: [keys.map((k) => k.tokenHash), keys.map((k) => k.botId), keys.map((k) => k.serverCount)],
      });
      const written = keys.map(() => false);
      for (const row of rows) written[Number(row.i) - 1] = true;
      return written;
    },
  });
  return { count, check, stats };
}
