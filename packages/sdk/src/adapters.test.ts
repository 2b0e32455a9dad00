/**
 * The three receivers (fetch handler, node:http handler, Express middleware behind node:http) on
 * signed requests built with the dispatcher's own signing code: onVote runs before the answer,
 * bounded by handlerTimeoutMs; a delivery id is marked seen only once onVote resolved; concurrent
 * requests with one id share one onVote; bodies are capped while they are read.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { sign, standardHeaders } from "@botdir/signing";
import {
  expressWebhook,
  fetchWebhook,
  memorySeenStore,
  nodeWebhook,
  type VoteDelivery,
  type WebhookReceiverOptions,
} from "./adapters.js";
import type { VoteAvailableEvent, VoteEvent } from "./contract.js";

const SECRET = `whsec_${"ab12".repeat(16)}`;
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
let ids = 0;
const newId = () => `0b7c9e2e-4c1a-4f0e-9a51-${String(++ids).padStart(12, "0")}`;
const voteBody = (userId = "223456789012345678") =>
  JSON.stringify({
    event: "vote.create",
    bot_id: "123456789012345678",
    user_id: userId,
    voted_at: "2026-11-21T12:00:00.000Z",
  });

const availableBody = (userId = "223456789012345678") =>
  JSON.stringify({
    event: "vote.available",
    bot_id: "123456789012345678",
    user_id: userId,
    voted_at: "2026-11-21T12:00:00.000Z",
    available_at: "2026-11-22T00:00:00.000Z",
  });

/** The headers of one signed attempt, as the dispatcher sends them. */
function signed(id: string, body: string, extra: Record<string, string> = {}): Record<string, string> {
  return { "content-type": "application/json", ...standardHeaders([SECRET], id, new Date(), body), ...extra };
}

interface Answer {
  status: number;
  body: string;
}

/** Sends one request to a receiver and reads its answer, whatever the adapter. */
type Send = (headers: Record<string, string>, body: string) => Promise<Answer>;

const servers: Server[] = [];
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

async function listen(listener: Parameters<typeof createServer>[1]): Promise<number> {
  const server = createServer(listener);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

type Kind = "fetch" | "node" | "express";

/**
 * A receiver of the given kind with these options, and how to send to it. `onHeader` is told each
 * header name the receiver reads: verification reads X-Webhook-Trace last, once the signature
 * checked out, so a test can tell when a request has reached the delivery-id bookkeeping.
 */
async function receiverOf(
  kind: Kind,
  options: WebhookReceiverOptions,
  onHeader: (name: string) => void = () => {},
): Promise<{ send: Send; port?: number }> {
  if (kind === "fetch") {
    const handle = fetchWebhook(options);
    return {
      send: async (headers, body) => {
        const request = new Request("http://127.0.0.1/hook", { method: "POST", headers, body });
        const get = request.headers.get.bind(request.headers);
        request.headers.get = (name: string) => {
          onHeader(name.toLowerCase());
          return get(name);
        };
        const res = await handle(request);
        return { status: res.status, body: await res.text() };
      },
    };
  }
  const spied = (req: IncomingMessage) => {
    const headers = req.headers;
    req.headers = new Proxy(headers, {
      get: (target, name) => {
        if (typeof name === "string") onHeader(name.toLowerCase());
        return Reflect.get(target, name);
      },
    });
    return req;
  };
  let port: number;
  if (kind === "node") {
    const handler = nodeWebhook(options);
    port = await listen((req, res) => handler(spied(req), res));
  } else {
    const middleware = expressWebhook(options);
    port = await listen((req, res) =>
      middleware(spied(req), res, (error) => {
        res.statusCode = 599; // Express's own error handler would answer 500; tell them apart here.
        res.end(String(error));
      }),
    );
  }
  return {
    port,
    send: async (headers, body) => {
      const res = await fetch(`http://127.0.0.1:${port}/hook`, {
        method: "POST",
        headers,
        body,
        signal: AbortSignal.timeout(20_000),
      });
      return { status: res.status, body: await res.text() };
    },
  };
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe("memorySeenStore", () => {
  it("when an id was added, then has is true; the least recently seen id is forgotten first", async () => {
    const seen = memorySeenStore(2);
    expect(await seen.has("a")).toBe(false);
    await seen.add("a");
    await seen.add("b");
    expect(await seen.has("a")).toBe(true); // a is now the most recently seen
    await seen.add("c"); // evicts b
    expect([await seen.has("a"), await seen.has("b"), await seen.has("c")]).toEqual([true, false, true]);
  });
});

describe.each<Kind>(["fetch", "node", "express"])("the %s receiver", (kind) => {
  it("when onVote is still running, then no answer yet: the 204 comes once onVote resolved", async () => {
    const events: string[] = [];
    const release = deferred();
    const started = deferred();
    const { send } = await receiverOf(kind, {
      secret: SECRET,
      onVote: async () => {
        events.push("onVote started");
        started.resolve();
        await release.promise;
        events.push("onVote resolved");
      },
    });
    const id = newId();
    const answer = send(signed(id, voteBody()), voteBody()).then((a) => {
      events.push(`answered ${a.status}`);
      return a;
    });
    await started.promise;
    events.push("released");
    release.resolve();
    expect((await answer).status).toBe(204);
    expect(events).toEqual(["onVote started", "released", "onVote resolved", "answered 204"]);
  });

  it("when a vote.create and a vote.available arrive, then each reaches its own hook once, typed by its event", async () => {
    const votes: VoteEvent[] = [];
    const available: [VoteAvailableEvent, VoteDelivery][] = [];
    const { send } = await receiverOf(kind, {
      secret: SECRET,
      onVote: (vote) => void votes.push(vote),
      onVoteAvailable: (event, delivery) => void available.push([event, delivery]),
    });
    const voteId = newId();
    const availableId = newId();
    expect((await send(signed(voteId, voteBody()), voteBody())).status).toBe(204);
    expect((await send(signed(availableId, availableBody()), availableBody())).status).toBe(204);
    expect((await send(signed(availableId, availableBody()), availableBody())).status).toBe(204);
    expect(votes.map((v) => v.event)).toEqual(["vote.create"]);
    expect(available).toEqual([[JSON.parse(availableBody()), { deliveryId: availableId, traceId: null }]]);
    expect(available[0]?.[0].available_at).toBe("2026-11-22T00:00:00.000Z");
  });

  it("when a vote.available arrives at a receiver without onVoteAvailable, then 204 and onVote is not called; one with only onVoteAvailable ignores vote.create", async () => {
    let votes = 0;
    const onlyVotes = await receiverOf(kind, { secret: SECRET, onVote: () => void votes++ });
    const id = newId();
    expect((await onlyVotes.send(signed(id, availableBody()), availableBody())).status).toBe(204);
    expect(votes).toBe(0);
    let reminders = 0;
    const onlyAvailable = await receiverOf(kind, { secret: SECRET, onVoteAvailable: () => void reminders++ });
    expect((await onlyAvailable.send(signed(newId(), voteBody()), voteBody())).status).toBe(204);
    expect((await onlyAvailable.send(signed(newId(), availableBody()), availableBody())).status).toBe(204);
    expect(reminders).toBe(1);
  });

  it("when onVote throws, then 500 with a JSON error and onError is told; the retry reaches onVote and gets 204", async () => {
    const calls: string[] = [];
    const errors: unknown[] = [];
    let fail = true;
    const { send } = await receiverOf(kind, {
      secret: SECRET,
      onVote: (_vote, { deliveryId }) => {
        calls.push(deliveryId);
        if (fail) throw new Error("database down");
      },
      onError: (error, delivery) => errors.push({ message: (error as Error).message, ...delivery }),
    });
    const id = newId();
    const failed = await send(signed(id, voteBody()), voteBody());
    expect(failed.status).toBe(500);
    expect(JSON.parse(failed.body)).toEqual({ error: expect.any(String) });
    expect(errors).toEqual([{ message: "database down", deliveryId: id, traceId: null }]);

    fail = false;
    expect((await send(signed(id, voteBody()), voteBody())).status).toBe(204); // the directory's retry
    expect((await send(signed(id, voteBody()), voteBody())).status).toBe(204); // now a repeat
    expect(calls).toEqual([id, id]);
  });

  it("when onVote outlasts handlerTimeoutMs, then 500 and the delivery is not marked seen", async () => {
    const calls: string[] = [];
    const errors: unknown[] = [];
    let hang = true;
    const never = new Promise<void>(() => {});
    const { send } = await receiverOf(kind, {
      secret: SECRET,
      handlerTimeoutMs: 50,
      onVote: (_vote, { deliveryId }) => {
        calls.push(deliveryId);
        return hang ? never : undefined;
      },
      onError: (error) => errors.push(error),
    });
    const id = newId();
    expect((await send(signed(id, voteBody()), voteBody())).status).toBe(500);
    expect(errors).toEqual([expect.objectContaining({ message: expect.stringMatching(/50 ms/) })]);
    hang = false;
    expect((await send(signed(id, voteBody()), voteBody())).status).toBe(204);
    expect(calls).toEqual([id, id]);
  });

  it("when two requests with one delivery id come at once, then onVote runs once and both get its outcome", async () => {
    for (const outcome of ["resolves", "throws"] as const) {
      let calls = 0;
      const release = deferred();
      const started = deferred();
      const secondVerified = deferred();
      let traceReads = 0;
      const { send } = await receiverOf(
        kind,
        {
          secret: SECRET,
          onVote: async () => {
            calls++;
            started.resolve();
            await release.promise;
            if (outcome === "throws") throw new Error("failed");
          },
          onError: () => {},
        },
        (name) => {
          if (name === "x-webhook-trace" && ++traceReads === 2) secondVerified.resolve();
        },
      );
      const id = newId();
      const first = send(signed(id, voteBody()), voteBody());
      await started.promise;
      const second = send(signed(id, voteBody()), voteBody());
      await secondVerified.promise;
      await new Promise<void>((resolve) => setImmediate(resolve)); // its bookkeeping is synchronous after that
      release.resolve();
      const statuses = [(await first).status, (await second).status];
      expect(statuses).toEqual(outcome === "resolves" ? [204, 204] : [500, 500]);
      expect(calls).toBe(1);
    }
  });

  it("when X-Webhook-Trace carries a trace id, then onVote gets it; a malformed one is null", async () => {
    const delivered: VoteDelivery[] = [];
    const { send } = await receiverOf(kind, { secret: SECRET, onVote: (_v, d) => void delivered.push(d) });
    const [a, b] = [newId(), newId()];
    await send(signed(a, voteBody(), { "x-webhook-trace": TRACE }), voteBody());
    await send(signed(b, voteBody(), { "x-webhook-trace": TRACE.toUpperCase() }), voteBody());
    expect(delivered).toEqual([
      { deliveryId: a, traceId: TRACE },
      { deliveryId: b, traceId: null },
    ]);
  });

  it("when the body declares more than maxBodyBytes, then 413 with a JSON error and onVote is not called", async () => {
    let calls = 0;
    const { send } = await receiverOf(kind, {
      secret: SECRET,
      maxBodyBytes: 100,
      onVote: () => void calls++,
    });
    const body = voteBody().padEnd(200, " ");
    const answer = await send(signed(newId(), body), body);
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toEqual({ error: "The request body is too large." });
    expect(calls).toBe(0);
  });
});

describe("bodies without Content-Length", () => {
  const limit = 1024;
  const options = { secret: SECRET, maxBodyBytes: limit, onVote: () => {} };

  it("when a fetch request streams past the limit and never ends, then 413 without waiting for the end", async () => {
    const handle = fetchWebhook(options);
    let cancelled = false;
    let chunks = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        // 2 KiB in chunks, then the sender goes quiet without ever closing the stream.
        if (chunks++ < 8) controller.enqueue(new Uint8Array(256));
        else return new Promise<void>(() => {});
      },
      cancel() {
        cancelled = true;
      },
    });
    const request = new Request("http://127.0.0.1/hook", {
      method: "POST",
      headers: signed(newId(), voteBody()),
      body: stream,
      duplex: "half",
    } as RequestInit);
    expect(request.headers.get("content-length")).toBeNull();
    const answer = await handle(request);
    expect(answer.status).toBe(413);
    expect(await answer.json()).toEqual({ error: "The request body is too large." });
    expect(cancelled).toBe(true);
  });

  it.each<Kind>(["node", "express"])(
    "when a chunked request to the %s receiver passes the limit and stays open, then 413 at once",
    async (kind) => {
      const { port } = await receiverOf(kind, options);
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          { host: "127.0.0.1", port, method: "POST", path: "/hook", headers: signed(newId(), voteBody()) },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
            req.destroy();
          },
        );
        req.on("error", reject);
        // Chunked (no Content-Length), more than the limit, and the request is never ended.
        for (let i = 0; i < 8; i++) req.write(Buffer.alloc(256, 0x20));
      });
      expect(status).toBe(413);
    },
  );

  it("when Express's raw parser already read a body longer than the limit, then 413", async () => {
    const middleware = expressWebhook(options);
    const body = Buffer.from(voteBody().padEnd(2 * limit, " "));
    const answered = await new Promise<{ status: number; body: string | undefined }>((resolve, reject) => {
      const res = {
        statusCode: 0,
        setHeader: () => {},
        end: (chunk?: string) => resolve({ status: res.statusCode, body: chunk }),
      };
      middleware({ headers: signed(newId(), body.toString()), body, on: () => undefined }, res, reject);
    });
    expect(answered).toEqual({
      status: 413,
      body: JSON.stringify({ error: "The request body is too large." }),
    });
  });
});

describe("receiver options", () => {
  it("when the secret is empty, or handlerTimeoutMs or toleranceSeconds is not a finite number ≥ 0 (or > 0), then a TypeError at construction", () => {
    for (const make of [fetchWebhook, nodeWebhook, expressWebhook]) {
      expect(() => make({ secret: SECRET, onVote: () => {}, toleranceSeconds: Number.NaN })).toThrow(
        TypeError,
      );
      expect(() => make({ secret: SECRET, onVote: () => {}, handlerTimeoutMs: 0 })).toThrow(TypeError);
      expect(() => make({ secret: "", onVote: () => {} })).toThrow(TypeError);
      expect(() => make({ secret: [], onVote: () => {} })).toThrow(TypeError);
      expect(() => make({ secret: SECRET })).toThrow("onVote must be a function");
      expect(() => make({ secret: SECRET, onVoteAvailable: 1 as never })).toThrow(
        "onVoteAvailable must be a function",
      );
      expect(() =>
        make({ secret: SECRET, onVote: () => {}, handlerTimeoutMs: Number.POSITIVE_INFINITY }),
      ).toThrow(TypeError);
    }
  });

  it("when a delivery id was marked seen, then 204 without onVote", async () => {
    let calls = 0;
    const id = newId();
    const seen = memorySeenStore();
    await seen.add(id);
    const handle = fetchWebhook({ secret: SECRET, seen, onVote: () => void calls++ });
    const res = await handle(
      new Request("http://h/", { method: "POST", headers: signed(id, voteBody()), body: voteBody() }),
    );
    expect(res.status).toBe(204);
    expect(calls).toBe(0);
  });

  it("when the seen store fails, then 503, onError is told and onVote is not called", async () => {
    let calls = 0;
    const errors: unknown[] = [];
    const handle = fetchWebhook({
      secret: SECRET,
      onError: (error) => errors.push(error),
      seen: {
        has: () => Promise.reject(new Error("redis down")),
        add: () => {},
      },
      onVote: () => void calls++,
    });
    const res = await handle(
      new Request("http://h/", { method: "POST", headers: signed(newId(), voteBody()), body: voteBody() }),
    );
    expect(res.status).toBe(503);
    expect(calls).toBe(0);
    expect(errors).toEqual([new Error("redis down")]);
  });
});

describe("fetchWebhook with legacy headers only", () => {
  const LEGACY = "whsec_legacy_only";
  const vote = (userId: string) =>
    JSON.stringify({
      event: "vote.create",
      bot_id: "123456789012345678",
      user_id: userId,
      voted_at: "2026-11-21T12:00:00.000Z",
    });
  const request = (body: string) =>
    new Request("http://127.0.0.1/hook", {
      method: "POST",
      headers: { authorization: LEGACY, "x-webhook-signature-256": sign(LEGACY, body) },
      body,
    });

  it("when requests carry no delivery id, then votes are told apart by user and time: each once", async () => {
    const handed: VoteEvent[] = [];
    const handle = fetchWebhook({ secret: LEGACY, onVote: (v) => void handed.push(v) });
    const answers = [];
    for (const body of [vote("223456789012345678"), vote("223456789012345678"), vote("323456789012345678")]) {
      answers.push((await handle(request(body))).status);
    }
    expect(answers).toEqual([204, 204, 204]);
    expect(handed.map((v) => v.user_id)).toEqual(["223456789012345678", "323456789012345678"]);
  });
});
