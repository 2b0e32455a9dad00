/**
 * The floor: a bare Express 5 app answering the benchmarked routes with constant JSON, parsing
 * bodies the same way. Whatever our service costs on top of this is ours.
 */
import express from "express";

const port = Number(process.argv[2] ?? 0);
const app = express();
app.disable("x-powered-by");
app.set("etag", false);
const json = express.json({ limit: "512kb" });
const votedAt = new Date().toISOString();

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
  res.json({ votes: [] });
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
