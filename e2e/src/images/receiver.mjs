// A webhook receiver in a container beside the compose stack (pnpm test:images): it checks each
// request's signature against the secret of the bot it names (set through POST /secrets), answers
// 204, and counts deliveries by X-Webhook-Delivery; GET /stats gives the counts, the votes seen and
// when each repeated delivery arrived (ms since the epoch).
// Plain Node.js, no dependencies: it runs on the local Node base image.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const secrets = new Map();
const seen = new Map(); // delivery id -> "botId userId"
let requests = 0;
let badSignature = 0;
const repeatedAt = [];

function read(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
  });
}

function signedBy(secret, body, header) {
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(body).digest("hex")}`);
  const given = Buffer.from(String(header ?? ""));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

createServer(async (req, res) => {
  const body = await read(req);
  if (req.method === "POST" && req.url === "/secrets") {
    for (const [bot, secret] of Object.entries(JSON.parse(body.toString()))) secrets.set(bot, secret);
    res.statusCode = 204;
    return res.end();
  }
  if (req.method === "GET" && req.url === "/stats") {
    res.setHeader("content-type", "application/json");
    return res.end(JSON.stringify({ requests, badSignature, deliveries: [...seen.values()], repeatedAt }));
  }
  const bot = /^\/hook\/([0-9]+)$/.exec(req.url ?? "")?.[1];
  requests += 1;
  let vote;
  try {
    vote = JSON.parse(body.toString());
  } catch {
    vote = undefined;
  }
  if (!bot || !vote || !signedBy(secrets.get(bot) ?? "", body, req.headers["x-webhook-signature-256"])) {
    badSignature += 1;
    res.statusCode = 401;
    return res.end();
  }
  const delivery = String(req.headers["x-webhook-delivery"]);
  if (seen.has(delivery)) repeatedAt.push(Date.now());
  seen.set(delivery, `${vote.bot_id} ${vote.user_id}`);
  res.statusCode = 204;
  res.end();
}).listen(8080, "0.0.0.0");
