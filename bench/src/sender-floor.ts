/**
 * The dispatcher's floor: what sending a vote's webhook costs with the design card's components and
 * nothing else. Each delivery is the dispatcher's own request (buildDeliveryRequest: the
 * `vote.create` body signed as every webhook, two HMAC-SHA256 signatures), sent with the
 * dispatcher's own got client (createWebhookSender: the safe lookup, the pooled keep-alive agent,
 * leanRequest, the stream API, the drained reply), at the dispatcher's concurrency
 * (DISPATCHER_CONCURRENCY, default 100) and with its "webhook delivered" log line through pino. No
 * PostgreSQL, Redis, BullMQ, claim, record, fairness or metrics: whatever the dispatcher costs per
 * delivery on top of this is ours.
 *
 * With SENDER_FLOOR_CLIENT=node the requests go through Node's `http.request` with a keep-alive
 * agent instead of got (the reply drained, the status line deciding): what got itself adds.
 *
 * `node sender-floor.js <port> <targets.json>`, where targets.json is `[{ "url", "botId" }, …]`
 * (deliveries go round-robin over them); `POST /send?n=N` sends N deliveries and answers
 * `{ "sent": N, "delivered": K }` when every one has its outcome.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import http, { createServer } from "node:http";
import { pino } from "pino";
import { buildDeliveryRequest } from "../../apps/webhook-dispatcher/src/delivery-request.js";
import {
  type AttemptOutcome,
  createWebhookSender,
  type WebhookRequest,
} from "../../apps/webhook-dispatcher/src/http-client.js";

const port = Number(process.argv[2] ?? 0);
const targets = JSON.parse(readFileSync(process.argv[3] ?? "", "utf8")) as { url: string; botId: string }[];
if (targets.length === 0) throw new Error("sender-floor: no targets");
const concurrency = Number(process.env.DISPATCHER_CONCURRENCY ?? 100);
const logger = pino({ name: "sender-floor", level: process.env.LOG_LEVEL ?? "info" });
const send =
  process.env.SENDER_FLOOR_CLIENT === "node"
    ? nodeSender()
    : createWebhookSender({ timeoutMs: 10_000, allowPrivateTargets: true });
const secret = `whsec_${randomBytes(24).toString("base64url")}`;
let next = 0;
let user = 9300000000000000000n;

async function sendMany(n: number): Promise<number> {
  let started = 0;
  let delivered = 0;
  const lane = async () => {
    while (started < n) {
      started++;
      const target = targets[next++ % targets.length] as { url: string; botId: string };
      const deliveryId = randomUUID();
      const now = new Date();
      const request = buildDeliveryRequest(
        { deliveryId, url: target.url, secret, botId: target.botId, userId: String(user++), votedAt: now },
        now,
      );
      const outcome = await send(request);
      if (outcome.ok) delivered++;
      logger.info(
        {
          deliveryId,
          botId: target.botId,
          attempt: 1,
          status: outcome.statusCode,
          errorKind: outcome.errorKind,
          ms: outcome.durationMs,
        },
        "webhook delivered",
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, lane));
  return delivered;
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (url.pathname === "/health") {
    res.end('{"status":"ok"}');
    return;
  }
  const n = Number(url.searchParams.get("n"));
  if (req.method !== "POST" || url.pathname !== "/send" || !Number.isInteger(n) || n < 1) {
    res.statusCode = 400;
    res.end('{"error":"POST /send?n=<deliveries>"}');
    return;
  }
  sendMany(n).then((delivered) => res.end(JSON.stringify({ sent: n, delivered })));
});
server.listen(port, "127.0.0.1");
/** Node's own client: one keep-alive agent, the reply drained, the status line deciding. */
function nodeSender() {
  const agent = new http.Agent({ keepAlive: true, scheduling: "lifo" });
  const sendOne = (request: WebhookRequest) =>
    new Promise<AttemptOutcome>((resolve) => {
      const started = performance.now();
      const headers = { ...request.headers, "Content-Length": String(request.body.length) };
      const req = http.request(request.url, { method: "POST", headers, agent }, (res) => {
        const statusCode = res.statusCode ?? 0;
        const ok = statusCode >= 200 && statusCode < 300;
        resolve({
          ok,
          statusCode,
          errorKind: ok ? null : "http_status",
          durationMs: Math.round(performance.now() - started),
        });
        res.resume();
      });
      req.on("error", () =>
        resolve({
          ok: false,
          statusCode: null,
          errorKind: "connection",
          durationMs: Math.round(performance.now() - started),
        }),
      );
      req.end(request.body);
    });
  return Object.assign(sendOne, { close: () => agent.destroy() });
}

process.on("SIGTERM", () => {
  send.close();
  server.close(() => process.exit(0));
});
