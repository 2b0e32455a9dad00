/**
 * The floor: a bare Express 5 app answering the benchmarked routes with constant JSON, parsing
 * bodies the same way, and paying what every production request pays regardless of its logic: a
 * request id and one JSON log line per request through pino at the apps' log level (the same
 * fields as service-kit's requestContext), and `/votes` answers 100 rows like ours. Whatever our
 * service costs on top of this is ours.
 */
import { randomUUID } from "node:crypto";
import express, { type NextFunction, type Request, type Response } from "express";
import { pino } from "pino";

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
app.get("/api/v1/bots/:id/check", (_req, res) => {
  res.json({ voted: 1, hasVoted: true, votedAt, nextVoteAt: votedAt });
});
app.post("/api/v1/bots/:id/stats", json, (_req, res) => {
  res.json({ success: true, server_count: 1 });
});
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
