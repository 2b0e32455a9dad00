/**
 * BotDirClient on a scripted fetch: a 2xx it cannot read or parse is an error (retried like a
 * network error for idempotent calls, thrown otherwise), and a redelivery whose first answer was
 * lost is reported as started. The `@ts-expect-error` lines are checked by the package's typecheck.
 */
import { BotDirClient } from "./client.js";
import { ApiError, InvalidResponseError } from "./errors.js";

type Step = (() => Response | Promise<Response>) | Error;

/** A fetch that plays `steps` in order, one per call, and records each call's method and path. */
function scripted(steps: Step[]) {
  const calls: string[] = [];
  const fetch = (async (input: string | URL | Request, init?: RequestInit) => {
    calls.push(`${init?.method ?? "GET"} ${new URL(String(input)).pathname}`);
    const step = steps.shift();
    if (step === undefined) throw new Error("no more scripted answers");
    if (step instanceof Error) throw step;
    return step();
  }) as typeof globalThis.fetch;
  return { fetch, calls };
}

const json =
  (status: number, body: unknown, headers: Record<string, string> = {}) =>
  () =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "content-type": "application/json", ...headers },
    });
const text = (status: number, body: string) => () => new Response(body, { status });
/** A 200 whose body fails while it is read (the connection dropped mid-body). */
const brokenBody = () => () =>
  new Response(
    new ReadableStream({
      start(controller) {
        controller.error(new Error("socket hang up"));
      },
    }),
    { status: 200 },
  );

const client = (fetch: typeof globalThis.fetch, retry: false | { attempts: number } = { attempts: 3 }) =>
  new BotDirClient({
    baseUrl: "http://directory.test",
    token: "t0ken",
    botId: "123456789012345678",
    fetch,
    retry: retry && { ...retry, baseDelayMs: 1, maxDelayMs: 1 },
  });

const VOTES = { votes: [{ user_id: "223456789012345678", voted_at: "2026-11-21T12:00:00.000Z" }] };

describe("a 2xx the client cannot read or parse", () => {
  it("when a GET's 2xx is not JSON, is cut off or lacks its list, then it is retried like a network error", async () => {
    const { fetch, calls } = scripted([
      text(200, "<html>proxy</html>"),
      brokenBody(),
      json(200, {}),
      json(200, VOTES),
    ]);
    expect(await client(fetch, { attempts: 4 }).votes()).toEqual(VOTES.votes);
    expect(calls).toHaveLength(4);
  });

  it("when the attempts are used up, then an InvalidResponseError with the status, never undefined or a TypeError", async () => {
    const { fetch } = scripted([text(200, ""), text(200, "")]);
    const error = await client(fetch, { attempts: 2 })
      .votes()
      .then(
        () => new Error("resolved"),
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(InvalidResponseError);
    expect(error).toMatchObject({ status: 200 });
  });

  it("when every page of votesSince is unreadable, then it throws instead of yielding nothing", async () => {
    const { fetch } = scripted([json(200, { votes: "x" })]);
    const pages = client(fetch, false).votesSince("2026-11-21T00:00:00.000Z");
    await expect(pages.next()).rejects.toBeInstanceOf(InvalidResponseError);
  });

  it("when postStats' 2xx has no server_count, then it is retried; a PUT likewise", async () => {
    const stats = scripted([json(200, { ok: true }), json(200, { server_count: 5 })]);
    expect(await client(stats.fetch).postStats({ serverCount: 5 })).toEqual({ server_count: 5 });
    expect(stats.calls).toEqual([
      "POST /api/v1/bots/123456789012345678/stats",
      "POST /api/v1/bots/123456789012345678/stats",
    ]);
    const commands = scripted([text(200, "{"), json(200, { success: true, count: 1 })]);
    expect(await client(commands.fetch).putCommands([{ name: "ping", description: "Pong" }])).toEqual({
      success: true,
      count: 1,
    });
  });

  it("when a redelivery's 2xx is unreadable, then it is thrown at once: a retry would start another series", async () => {
    const { fetch, calls } = scripted([text(202, "oops"), json(202, {})]);
    await expect(client(fetch).redeliver("0b7c9e2e-4c1a-4f0e-9a51-3d2f8f1c6a10")).rejects.toBeInstanceOf(
      InvalidResponseError,
    );
    expect(calls).toHaveLength(1);
  });
});

describe("redeliver", () => {
  const ID = "0b7c9e2e-4c1a-4f0e-9a51-3d2f8f1c6a10";
  const PENDING = { error: "The delivery is still pending; redeliver it once it is delivered or failed." };
  const pending = () => json(409, PENDING, { "X-Botdir-Conflict": "delivery_pending" });
  const noWebhook = () =>
    json(
      409,
      { error: "The bot has no webhook URL; set one before redelivering." },
      { "X-Botdir-Conflict": "no_webhook" },
    );

  it("when the first try timed out or got a 5xx and the retry gets 409 delivery_pending, then the redelivery is reported as started", async () => {
    for (const lost of [new Error("The operation was aborted due to timeout"), text(502, "Bad gateway")]) {
      const { fetch, calls } = scripted([lost, pending()]);
      expect(await client(fetch).redeliver(ID)).toEqual({ deliveryId: ID, state: "pending", series: null });
      expect(calls).toHaveLength(2);
    }
  });

  it("when the first try was lost and the retry gets a 409 of another cause (no webhook, or no X-Botdir-Conflict), then ApiError with that cause", async () => {
    const lost = new Error("The operation was aborted due to timeout");
    await expect(client(scripted([lost, noWebhook()]).fetch).redeliver(ID)).rejects.toMatchObject({
      status: 409,
      conflict: "no_webhook",
    });
    await expect(client(scripted([lost, json(409, PENDING)]).fetch).redeliver(ID)).rejects.toMatchObject({
      status: 409,
      conflict: undefined,
    });
  });

  it("when the first try itself gets 409, then ApiError 409 as before", async () => {
    const { fetch } = scripted([json(409, PENDING)]);
    await expect(client(fetch).redeliver(ID)).rejects.toMatchObject({ status: 409 });
    await expect(client(scripted([json(409, PENDING)]).fetch).redeliver(ID)).rejects.toBeInstanceOf(ApiError);
  });

  it("when the answer arrives, then its series is returned", async () => {
    const started = { deliveryId: ID, state: "pending", series: 2 };
    expect(await client(scripted([json(202, started)]).fetch).redeliver(ID)).toEqual(started);
  });
});

describe("Command types", () => {
  it("when a command has no description, then only a context-menu command (type 2 or 3) type-checks", async () => {
    const { fetch } = scripted([
      json(200, { success: true, count: 3 }),
      json(200, { success: true, count: 0 }),
    ]);
    const c = client(fetch);
    await c.putCommands([
      { name: "ping", description: "Checks the latency" },
      { name: "Report user", type: 2 },
      { name: "Quote", type: 3, description: "" },
    ]);
    const typeOnly = () => {
      // @ts-expect-error the server requires a description for chat commands (400)
      void c.putCommands([{ name: "help" }]);
      // @ts-expect-error type 1 (chat input) needs a description too
      void c.putCommands([{ name: "help", type: 1 }]);
    };
    expect(typeof typeOnly).toBe("function");
    expect(await c.putCommands([])).toEqual({ success: true, count: 0 });
  });
});
