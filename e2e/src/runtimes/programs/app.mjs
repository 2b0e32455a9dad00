// The owner's side of the runtime matrix, the same on every runtime: plain JavaScript that uses
// the installed @botdir/sdk through its public API only. A fetch-style handler:
//   POST /verify   verifyWebhook on the raw body (the route's secret), 204 or 401
//   POST /fetch    fetchWebhook's receiver
//   POST /client   BotDirClient against the running API: every call the run checks, then stats
//                  posts without retries until the API answers 429 (bounded)
//   GET  /log      the votes the two webhook routes handed on, in order
//   GET  /health   the runtime's name
import { ApiError, BotDirClient, fetchWebhook, verifyWebhook, WebhookVerificationError } from "@botdir/sdk";

const json = (status, value) =>
  new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });

/**
 * @param {{ runtime: string, verifySecret: string, fetchSecret: string, apiBase: string, botId: string, token: string }} config
 */
export function createApp(config) {
  const handled = [];
  const receiver = fetchWebhook({
    secret: config.fetchSecret,
    onVote: (vote, { deliveryId }) => void handled.push({ route: "fetch", deliveryId, vote }),
  });

  /** verifyWebhook on the bytes and headers as the server got them (Headers, or node's object). */
  async function verify(body, headers) {
    try {
      const verified = await verifyWebhook({ body, headers, secret: config.verifySecret });
      handled.push({ route: "verify", deliveryId: verified.deliveryId, vote: verified.event });
      return { status: 204 };
    } catch (error) {
      if (error instanceof WebhookVerificationError) return { status: 401, reason: error.reason };
      throw error;
    }
  }

  async function handle(request, context) {
    const { pathname } = new URL(request.url);
    if (pathname === "/health") return json(200, { runtime: config.runtime });
    if (pathname === "/log") return json(200, handled);
    if (request.method !== "POST") return json(404, { error: "Not found." });
    if (pathname === "/fetch") return receiver(request, context);
    if (pathname === "/verify") {
      const result = await verify(new Uint8Array(await request.arrayBuffer()), request.headers);
      return result.status === 204 ? new Response(null, { status: 204 }) : json(401, result);
    }
    if (pathname === "/client") return json(200, await useClient(config, await request.json()));
    return json(404, { error: "Not found." });
  }

  return { handle, verify };
}

/** Every client call the run checks, each result or error as JSON. */
async function useClient(config, { voterId, otherUserId }) {
  const client = new BotDirClient({
    baseUrl: config.apiBase,
    token: config.token,
    botId: config.botId,
    retry: false,
  });
  const out = {};
  const call = async (name, work) => {
    try {
      out[name] = { ok: await work() };
    } catch (error) {
      out[name] = { error: describe(error) };
    }
  };
  await call("postStats", () => client.postStats({ serverCount: 1482 }));
  await call("putCommands", () => client.putCommands([{ name: "ping", description: "Checks the latency" }]));
  await call("check", () => client.check(voterId));
  await call("hasVotedOther", () => client.hasVoted(otherUserId));
  await call("votes", () => client.votes({ limit: 10 }));
  await call("webhookDeliveries", () => client.webhookDeliveries());
  // The stats limit is 60 a minute per token: the 61st post of the minute is the API's 429.
  let posts = 0;
  let limited = null;
  while (limited === null && posts < 70) {
    posts += 1;
    try {
      await client.postStats({ serverCount: posts });
    } catch (error) {
      limited = describe(error);
    }
  }
  out.rateLimit = { posts, error: limited };
  return out;
}

function describe(error) {
  if (error instanceof ApiError) {
    return { apiError: true, status: error.status, message: error.message, retryAfter: error.retryAfter };
  }
  return { apiError: false, name: error?.name, message: String(error?.message ?? error) };
}
