/**
 * @botdir/sdk's receiver adapters (Express middleware, node:http handler, fetch handler behind a
 * node:http bridge) receiving real deliveries from the real dispatcher (child processes), and
 * refusing what they must: a tampered body, a wrong secret, a timestamp outside the tolerance; a
 * repeated delivery id is answered 204 and not handed on; an onVote that throws is answered 500 and
 * the dispatcher's retry reaches onVote again. Then a secret rotation through the
 * management endpoint: during the overlap the dispatcher signs with both secrets and a receiver
 * holding either one accepts.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUserId } from "@botdir/db/testing";
import {
  expressWebhook,
  fetchWebhook,
  nodeWebhook,
  type VoteEvent,
  type WebhookReceiverOptions,
} from "@botdir/sdk";
import { standardHeaders } from "@botdir/signing";
import express from "express";
import { call, waitFor } from "../../src/processes.js";
import { type ReceivedRequest, startReceiver } from "../../src/receivers.js";
import { useStack } from "../../src/stack.js";

const stack = useStack({ privateRedis: true });
const newSecret = () => `whsec_${randomBytes(32).toString("hex")}`;
const servers: Server[] = [];

afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

interface Handled {
  vote: VoteEvent;
  deliveryId: string;
}

type AdapterKind = "express" | "node" | "fetch";

/** node:http → Request → the fetch handler → Response → node:http, as a platform would. */
function fetchBridge(handler: ReturnType<typeof fetchWebhook>): RequestListener {
  return (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
      }
      const request = new Request(`http://127.0.0.1${req.url}`, {
        method: req.method,
        headers,
        body: Buffer.concat(chunks),
      });
      const response = await handler(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(Buffer.from(await response.arrayBuffer()));
    });
  };
}

/** One server of the given kind; each path is a receiver with its own options. */
async function startAdapter(kind: AdapterKind, routes: Record<string, WebhookReceiverOptions>) {
  let listener: RequestListener;
  if (kind === "express") {
    const app = express();
    for (const [path, options] of Object.entries(routes)) app.post(path, expressWebhook(options));
    listener = app;
  } else {
    const handlers = new Map(
      Object.entries(routes).map(([path, options]) => [
        path,
        kind === "node" ? nodeWebhook(options) : fetchBridge(fetchWebhook(options)),
      ]),
    );
    listener = (req: IncomingMessage, res) => {
      const handler = handlers.get(req.url ?? "");
      if (handler) return handler(req, res);
      res.statusCode = 404;
      res.end();
    };
  }
  const server = createServer(listener);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function recorder(secret: string | string[]) {
  const handled: Handled[] = [];
  const options: WebhookReceiverOptions = {
    secret,
    onVote: (vote, { deliveryId }) => void handled.push({ vote, deliveryId }),
  };
  return { handled, options, of: (id: string) => handled.filter((h) => h.deliveryId === id) };
}

async function deliveredOnce(botId: string, index = 0) {
  return waitFor(async () => {
    const d = (await stack.deliveries(botId))[index];
    return d?.state === "delivered" ? d : null;
  }, "the delivery to be delivered");
}

/** Replays a request the dispatcher sent (or a changed copy) to a receiver. */
function replay(
  url: string,
  request: ReceivedRequest,
  changes: { body?: string; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (typeof value === "string" && !["host", "content-length", "connection"].includes(name))
      headers[name] = value;
  }
  return fetch(url, {
    method: "POST",
    headers: { ...headers, ...changes.headers },
    body: changes.body ?? request.body,
    signal: AbortSignal.timeout(10_000),
  }).then(async (res) => ({ status: res.status, body: await res.text() }));
}

/** A receiver whose onVote throws the first time it gets each delivery id. */
function failsOnce(secret: string) {
  const calls: string[] = [];
  const options: WebhookReceiverOptions = {
    secret,
    onVote: (_vote, { deliveryId }) => {
      calls.push(deliveryId);
      if (calls.filter((id) => id === deliveryId).length === 1) throw new Error("not this time");
    },
    onError: () => {},
  };
  return { options, of: (id: string) => calls.filter((c) => c === id) };
}

describe.each<AdapterKind>(["express", "node", "fetch"])("the %s adapter", (kind) => {
  const secret = newSecret();
  const right = recorder(secret);
  const wrong = recorder(newSecret());
  const flaky = failsOnce(secret);
  let base: string;

  beforeAll(async () => {
    base = await startAdapter(kind, {
      "/hook": right.options,
      "/wrong": wrong.options,
      "/flaky": flaky.options,
    });
  });

  it("when onVote throws, then the attempt is answered 500 and the dispatcher's retry reaches onVote again: 204", async () => {
    const bot = await stack.webhookBot(`${base}/flaky`, secret);
    await stack.vote(bot.id, randomUserId());
    const delivery = await deliveredOnce(bot.id);
    expect((await stack.attempts(delivery.id)).map((a) => a.statusCode)).toEqual([500, 204]);
    expect(flaky.of(delivery.id)).toHaveLength(2);
  }, 30_000);

  it("when the dispatcher delivers a vote, then it answers 204 and hands the vote to onVote", async () => {
    const bot = await stack.webhookBot(`${base}/hook`, secret);
    const voter = randomUserId();
    expect((await stack.vote(bot.id, voter)).status).toBe(201);
    const delivery = await deliveredOnce(bot.id);
    await waitFor(() => right.of(delivery.id).length === 1, "onVote");
    expect(right.of(delivery.id)[0]?.vote).toEqual({
      event: "vote.create",
      bot_id: bot.id,
      user_id: voter,
      voted_at: expect.any(String),
    });
    expect((await stack.attempts(delivery.id)).map((a) => a.statusCode)).toEqual([204]);
  }, 30_000);

  it("when the same delivery comes again (a redelivery), then 204 and onVote is not called again", async () => {
    const bot = await stack.webhookBot(`${base}/hook`, secret);
    const auth = { authorization: bot.token };
    await stack.vote(bot.id, randomUserId());
    const first = await deliveredOnce(bot.id);
    await waitFor(() => right.of(first.id).length === 1, "onVote for the first delivery");
    const redeliver = `${stack.api.base}/api/v1/bots/${bot.id}/webhook/deliveries/${first.id}/redeliver`;
    expect((await call(redeliver, { method: "POST", headers: auth })).status).toBe(202);
    await waitFor(
      async () => {
        const attempts = await stack.attempts(first.id);
        return attempts.some((a) => a.series === 1 && a.statusCode === 204);
      },
      "the redelivery's 204",
      30_000,
    );
    // Sentinel: a later vote is handed on, so a second call for the first id would have run by then.
    await stack.vote(bot.id, randomUserId());
    const second = await deliveredOnce(bot.id, 1);
    await waitFor(() => right.of(second.id).length === 1, "onVote for the sentinel");
    expect(right.of(first.id)).toHaveLength(1);
  }, 60_000);

  it("when the receiver holds another secret, then it answers 401 to the real delivery and hands nothing on", async () => {
    const bot = await stack.webhookBot(`${base}/wrong`, secret);
    await stack.vote(bot.id, randomUserId());
    const [delivery] = await stack.deliveries(bot.id);
    const attempts = await waitFor(async () => {
      const rows = await stack.attempts(delivery!.id);
      return rows.length > 0 ? rows : null;
    }, "the first attempt");
    expect(attempts[0]?.statusCode).toBe(401);
    expect(wrong.handled).toEqual([]);
  }, 30_000);

  it("when a captured delivery is tampered with, replayed with an old timestamp, or repeated, then 401, 401, 204 once", async () => {
    // The dispatcher's real request, captured on its way to another receiver with the same secret.
    const bot = await stack.webhookBot(stack.receiver.url(`/${kind}`), secret);
    const voter = randomUserId();
    await stack.vote(bot.id, voter);
    const [real] = await waitFor(
      () => (stack.receiver.forPath(`/${kind}`).length ? stack.receiver.forPath(`/${kind}`) : null),
      "the capture",
    );
    const deliveryId = real!.headers["webhook-id"] as string;

    const tampered = await replay(`${base}/hook`, real!, {
      body: real!.body.toString("utf8").replace(voter, randomUserId()),
    });
    expect(tampered).toEqual({
      status: 401,
      body: JSON.stringify({ error: "No webhook-signature matches the secret." }),
    });

    // Correctly signed with the real secret, but ten minutes ago: what a replay of a captured request looks like.
    const old = standardHeaders([secret], deliveryId, new Date(Date.now() - 600_000), real!.body);
    const stale = await replay(`${base}/hook`, real!, { headers: old });
    expect(stale.status).toBe(401);
    expect(JSON.parse(stale.body)).toEqual({
      error: "webhook-timestamp is more than 300 seconds from this clock.",
    });

    expect(await replay(`${base}/hook`, real!)).toEqual({ status: 204, body: "" });
    await waitFor(() => right.of(deliveryId).length === 1, "onVote for the genuine request");
    expect(await replay(`${base}/hook`, real!)).toEqual({ status: 204, body: "" });
    // Sentinel: another genuine delivery is handed on after the repeat.
    await stack.vote(bot.id, randomUserId());
    const [, sentinel] = await waitFor(
      () => (stack.receiver.forPath(`/${kind}`).length === 2 ? stack.receiver.forPath(`/${kind}`) : null),
      "the second capture",
    );
    expect((await replay(`${base}/hook`, sentinel!)).status).toBe(204);
    await waitFor(
      () => right.of(sentinel!.headers["webhook-id"] as string).length === 1,
      "onVote for the sentinel",
    );
    expect(right.of(deliveryId)).toHaveLength(1);
  }, 30_000);
});

describe("verification during a secret rotation", () => {
  it("when the secret is rotated, then deliveries carry two signatures and a receiver holding either secret accepts", async () => {
    const oldSecret = newSecret();
    const holdsOld = recorder(oldSecret);
    let holdsNew: ReturnType<typeof recorder> | undefined;
    const base = await startAdapter("express", { "/old": holdsOld.options });
    const bot = await stack.webhookBot(`${base}/old`, oldSecret);

    const rotated = await call(`${stack.ingest.base}/internal/v1/bots/${bot.id}/webhook/secret`, {
      method: "POST",
      headers: { authorization: stack.keys.internalKey },
    });
    expect(rotated.status).toBe(200);
    const rotatedSecret = (rotated.body as { secret: string }).secret;
    expect(rotatedSecret).not.toBe(oldSecret);

    // A receiver not yet deployed with the new secret.
    await stack.vote(bot.id, randomUserId());
    const first = await deliveredOnce(bot.id);
    await waitFor(() => holdsOld.of(first.id).length === 1, "the receiver holding the old secret");

    // A receiver that has only the new secret: same bot, its URL moved to it.
    holdsNew = recorder(rotatedSecret);
    const newBase = await startAdapter("fetch", { "/new": holdsNew.options });
    await stack.db.prisma.bot.update({ where: { id: bot.id }, data: { webhookUrl: `${newBase}/new` } });
    const check = await startReceiver();
    try {
      await stack.vote(bot.id, randomUserId());
      const second = await deliveredOnce(bot.id, 1);
      await waitFor(() => holdsNew?.of(second.id).length === 1, "the receiver holding the new secret");
      // And the request itself carries both signatures (captured from the next vote).
      await stack.db.prisma.bot.update({ where: { id: bot.id }, data: { webhookUrl: check.url("/both") } });
      await stack.vote(bot.id, randomUserId());
      const [captured] = await waitFor(() => (check.requests.length ? check.requests : null), "the capture");
      expect(String(captured?.headers["webhook-signature"]).split(" ")).toHaveLength(2);
    } finally {
      await check.close();
    }
  }, 60_000);
});
