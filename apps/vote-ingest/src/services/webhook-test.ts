/**
 * The test event (`webhook.test`): one signed POST to a bot's webhook, sent now by vote-ingest and
 * answered synchronously. It follows the dispatcher's rules for an attempt: no redirects (a 3xx is a
 * failure of kind `redirect`), a hard deadline, and the SSRF rules of @botdir/webhook-targets — an
 * IP-literal host is classified before connecting and a host name goes through the checked, pinned
 * lookup, so a loopback/private target is refused (`refused_target`) unless
 * WEBHOOK_ALLOW_PRIVATE_TARGETS. Nothing is read from the reply but its status line.
 */
import http from "node:http";
import https from "node:https";
import { performance } from "node:perf_hooks";
import { VOTE_AVAILABLE_EVENT, VOTE_WINDOW_MS, type WebhookEventName } from "@botdir/schema";
import {
  classifyAddress,
  createSafeLookup,
  isIpLiteral,
  type Resolver,
  signedWebhookRequest,
  systemResolver,
} from "@botdir/webhook-targets";

export const TEST_EVENT = "webhook.test";

/** What a test event can send: `webhook.test`, or a sample of an event a webhook subscribes to. */
export type TestEventName = typeof TEST_EVENT | WebhookEventName;

/** The sample voter of a test `vote.create` or `vote.available` (no such user exists). */
export const TEST_USER_ID = "000000000000000000";

/** The body of a test event: `event` tells it from a vote (`vote.create` carries user_id, voted_at). */
export interface TestEventPayload {
  event: typeof TEST_EVENT;
  bot_id: string;
  test: true;
  sent_at: string;
}

export interface TestOutcome {
  delivered: boolean;
  statusCode: number | null;
  errorKind: string | null;
  durationMs: number;
}

export interface TestSendOptions {
  allowPrivateTargets: boolean;
  timeoutMs: number;
  resolver?: Resolver | null;
}

const TLS = /CERT|SSL|TLS|HOSTNAME_MISMATCH|EPROTO/;
const DNS = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "ENODATA"]);

function classify(error: NodeJS.ErrnoException | undefined): string {
  const code = error?.code ?? "";
  if (code === "ETARGETREFUSED") return "refused_target";
  if (code === "ETIMEDOUT") return "timeout";
  if (DNS.has(code)) return "dns";
  if (TLS.test(code)) return "tls";
  return "connection";
}

function testPayload(
  event: TestEventName,
  botId: string,
  now: Date,
): { event: string; [key: string]: unknown } {
  if (event === TEST_EVENT) {
    return { event, bot_id: botId, test: true, sent_at: now.toISOString() } satisfies TestEventPayload;
  }
  const vote = { bot_id: botId, user_id: TEST_USER_ID };
  if (event === VOTE_AVAILABLE_EVENT) {
    const votedAt = new Date(now.getTime() - VOTE_WINDOW_MS).toISOString();
    return { event, ...vote, voted_at: votedAt, available_at: now.toISOString(), test: true };
  }
  return { event, ...vote, voted_at: now.toISOString(), test: true };
}

/**
 * The exact request of a test event: signed as a delivery (signedWebhookRequest), event
 * `webhook.test` by default; `vote.create` or `vote.available` send that event's body for the
 * sample user, voted now (or 12 hours ago, so the window ends now), with `"test": true` at the end.
 */
export function buildTestRequest(input: {
  id: string;
  botId: string;
  secret: string;
  previousSecret: string | null;
  now: Date;
  /** X-Webhook-Trace: the trace of the request that sends the test event. */
  traceId?: string | null;
  event?: TestEventName;
}): { body: Buffer; headers: Record<string, string> } {
  const payload = testPayload(input.event ?? TEST_EVENT, input.botId, input.now);
  const { id, secret, previousSecret, now } = input;
  return signedWebhookRequest(payload, {
    id,
    secret,
    previousSecret,
    signedAt: now,
    traceId: input.traceId ?? null,
  });
}

/** Sends one request; never rejects. */
export function sendTestRequest(
  rawUrl: string,
  request: { body: Buffer; headers: Record<string, string> },
  options: TestSendOptions,
): Promise<TestOutcome> {
  const started = performance.now();
  const took = () => Math.round(performance.now() - started);
  const refused = (): TestOutcome => ({
    delivered: false,
    statusCode: null,
    errorKind: "refused_target",
    durationMs: took(),
  });
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    return Promise.resolve(refused());
  }
  const allow = options.allowPrivateTargets;
  if (!(url.protocol === "https:" || (allow && url.protocol === "http:"))) return Promise.resolve(refused());
  if (!allow && isIpLiteral(url.hostname) && !classifyAddress(url.hostname).ok) {
    return Promise.resolve(refused());
  }
  const lookup = createSafeLookup({ allowPrivate: allow }, options.resolver ?? systemResolver);
  const client = url.protocol === "https:" ? https : http;
  return new Promise((resolve) => {
    let settled = false;
    const done = (outcome: Omit<TestOutcome, "durationMs">) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...outcome, durationMs: took() });
    };
    const req = client.request(
      url,
      {
        method: "POST",
        headers: { ...request.headers, "Content-Length": String(request.body.length) },
        lookup: lookup as never,
        agent: false,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        res.resume();
        res.on("error", () => {});
        req.destroy();
        if (status >= 200 && status < 300) done({ delivered: true, statusCode: status, errorKind: null });
        else if (status >= 300 && status < 400)
          done({ delivered: false, statusCode: status, errorKind: "redirect" });
        else done({ delivered: false, statusCode: status, errorKind: "http_status" });
      },
    );
    const timer = setTimeout(() => {
      done({ delivered: false, statusCode: null, errorKind: "timeout" });
      req.destroy();
    }, options.timeoutMs);
    req.on("error", (error: NodeJS.ErrnoException) => {
      done({ delivered: false, statusCode: null, errorKind: classify(error) });
    });
    req.end(request.body);
  });
}
