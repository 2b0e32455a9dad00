/**
 * One HTTP attempt of a webhook delivery: POST the signed bytes, classify the outcome by the status
 * line, with no redirects and a hard deadline.
 *
 * The client is got (the design card's choice for outgoing webhooks): one instance, configured once,
 * with redirects off (a 3xx is a failed attempt of kind `redirect`), its own retries off (the
 * five-attempt schedule is ours, in PostgreSQL), HTTP errors as plain responses, no decompression
 * (a body is never inflated), no DNS cache, and `timeout.request` as the attempt's hard deadline
 * (connect, TLS, request, status line; got reports it as a TimeoutError, recorded as `timeout`).
 * Its stream API is used, not the promise API, because the promise API buffers the whole reply body
 * before it resolves: here the status line alone decides, and the body is read only while it is
 * small and quick (below). got adds no header of its own: ours carry User-Agent (over got's
 * default), Content-Type and Content-Length, and with `decompress: false` no Accept-Encoding is sent.
 *
 * Keep-alive and SSRF safety: got connects through the http/https agents given in `agent`, and Node
 * lets an agent's own options override the request's, so every new connection goes through the safe
 * lookup those agents carry (@botdir/webhook-targets net.ts): the host is resolved once with the
 * asynchronous resolver (c-ares, no libuv thread held) under the DNS deadline (a failure or the
 * deadline is error kind `dns`), refused unless public, and the socket connects to exactly the
 * checked address. A pooled socket is therefore
 * always one that was checked when it connected. IP-literal hosts (which Node connects to without a
 * lookup) are checked before every request by checkTarget.
 *
 * Replies and pooled sockets:
 * - the body is drained in the background, only while it is small (MAX_DRAINED_BODY_BYTES) and
 *   quick (DRAIN_MS, within the attempt's deadline), so the socket goes back to the pool; anything
 *   bigger, slower or broken destroys the request and its socket instead. Nothing is buffered, so
 *   a huge or slow-dripping reply costs neither memory nor time;
 * - a request that fails on a reused pooled connection before any response (the receiver closed an
 *   idle keep-alive connection as we sent; got exposes Node's `reusedSocket`) is sent once more, on
 *   a new connection from agents without keep-alive, within the same attempt and deadline; it is the
 *   same attempt, as receivers already de-duplicate. A failure on a new connection is never repeated.
 */
import http from "node:http";
import https from "node:https";
import { performance } from "node:perf_hooks";
import {
  classifyAddress,
  createDnsResolver,
  createSafeLookup,
  DEFAULT_DNS_TIMEOUT_MS,
  isIpLiteral,
  type Resolver,
} from "@botdir/webhook-targets";
import got, { type Got } from "got";

/** Why an attempt failed; null in the attempt log means delivered. */
export type ErrorKind =
  | "http_status"
  | "redirect"
  | "timeout"
  | "connection"
  | "tls"
  | "dns"
  | "refused_target"
  | "interrupted"
  /** No configured key decrypts the bot's webhook secret: nothing was sent (deliver.handler.ts). */
  | "secret_unreadable";

export interface AttemptOutcome {
  ok: boolean;
  statusCode: number | null;
  errorKind: ErrorKind | null;
  durationMs: number;
}

export interface WebhookRequest {
  url: string;
  body: Buffer;
  headers: Record<string, string>;
}

export interface SenderOptions {
  timeoutMs: number;
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and loopback/private targets allowed (development, tests). */
  allowPrivateTargets: boolean;
  /** Tests inject a resolver to simulate DNS answers (default: the asynchronous resolver). */
  resolver?: Resolver;
  /**
   * Deadline of the DNS lookup of a new connection (WEBHOOK_DNS_TIMEOUT_MS), applied to injected
   * resolvers too; default the smaller of DEFAULT_DNS_TIMEOUT_MS and half the attempt's timeout.
   */
  dnsTimeoutMs?: number;
  /** Nameservers instead of /etc/resolv.conf's (WEBHOOK_DNS_SERVERS). */
  dnsServers?: readonly string[];
  /**
   * An idle pooled connection is closed after this long (default IDLE_SOCKET_MS; Node shortens it
   * further when the receiver sends `Keep-Alive: timeout=N`). 0 turns keep-alive off.
   */
  idleSocketMs?: number;
}

/** Sends one attempt; never rejects. */
export type SendAttempt = (request: WebhookRequest) => Promise<AttemptOutcome>;

/** A SendAttempt with pooled connections; `close()` drops them (at shutdown). */
export interface WebhookSender {
  (request: WebhookRequest): Promise<AttemptOutcome>;
  close(): void;
}

/** Below the 5 s idle timeout of Node's http server, the most common receiver. */
export const IDLE_SOCKET_MS = 4_000;
/** A reply body up to this size is read (and discarded) so the connection can be reused. */
export const MAX_DRAINED_BODY_BYTES = 64 * 1024;
/** How long a reply body may take to arrive before the connection is dropped instead. */
export const DRAIN_MS = 1_000;

const TLS_CODES = new Set([
  "EPROTO",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_REVOKED",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "HOSTNAME_MISMATCH",
]);
/** EDNS: DnsLookupFailed of @botdir/webhook-targets (no answer, a failing server, the deadline). */
const DNS_CODES = new Set(["EDNS", "ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "ENODATA"]);

/** Maps a got / Node error to an error kind. */
export function classifyError(error: unknown): ErrorKind {
  const e = error as { name?: string; code?: string; cause?: unknown } | null;
  const codes = [e?.code, (e?.cause as { code?: string } | undefined)?.code].filter(Boolean) as string[];
  if (codes.includes("ETARGETREFUSED")) return "refused_target";
  // Before the timeout: a lookup that ran out of its (shorter) deadline is a DNS failure.
  if (codes.some((c) => DNS_CODES.has(c))) return "dns";
  if (e?.name === "TimeoutError" || codes.includes("ETIMEDOUT")) return "timeout";
  if (codes.some((c) => TLS_CODES.has(c) || c.startsWith("ERR_SSL_") || c.startsWith("ERR_TLS_")))
    return "tls";
  return "connection";
}

/** Checks what can be checked before connecting: the URL itself and IP-literal hosts. */
export function checkTarget(
  raw: string,
  allowPrivateTargets: boolean,
): { ok: true; url: URL } | { ok: false } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false };
  }
  const scheme = url.protocol === "https:" || (allowPrivateTargets && url.protocol === "http:");
  if (!scheme || url.username || url.password) return { ok: false };
  // Node does not call `lookup` for an IP-literal host, so the connect-time check cannot see it.
  if (!allowPrivateTargets && isIpLiteral(url.hostname) && !classifyAddress(url.hostname).ok) {
    return { ok: false };
  }
  return { ok: true, url };
}

/** URLs whose checkTarget verdict a sender keeps (the oldest goes first). */
export const CHECKED_URLS_KEPT = 10_000;

/**
 * checkTarget's verdict per URL string, remembered: it depends on nothing but the string and
 * `allowPrivateTargets`, and a webhook's URL is the same for every attempt.
 */
function checkedTargets(allowPrivateTargets: boolean): (raw: string) => boolean {
  const verdicts = new Map<string, boolean>();
  return (raw) => {
    let ok = verdicts.get(raw);
    if (ok === undefined) {
      ok = checkTarget(raw, allowPrivateTargets).ok;
      if (verdicts.size >= CHECKED_URLS_KEPT) verdicts.delete(verdicts.keys().next().value as string);
      verdicts.set(raw, ok);
    }
    return ok;
  };
}

/** A connection that was closed by the receiver while idle in the pool fails like this. */
const STALE_SOCKET_CODES = new Set(["ECONNRESET", "EPIPE"]);

function timeoutError(ms: number): Error {
  return Object.assign(new Error(`No response within ${ms} ms`), { name: "TimeoutError", code: "ETIMEDOUT" });
}

export interface Agents {
  http: http.Agent;
  https: https.Agent;
}

/**
 * got's request function, given only the native options that carry a value here. got builds one
 * object with every TLS and socket option it knows (nearly all undefined: createClient sets none of
 * them, and its `checkServerIdentity` is Node's own default), and Node's ClientRequest and
 * Agent.addRequest each copy that object again: ≈ 20 µs of CPU per request on Node 24. The options
 * got passes are checked against this list by http-client.test.ts.
 */
export function leanRequest(url: URL, options: http.RequestOptions): http.ClientRequest {
  const lean: http.RequestOptions = {
    method: options.method,
    headers: options.headers,
    agent: options.agent,
    setHost: options.setHost,
  };
  return url.protocol === "https:" ? https.request(url, lean) : http.request(url, lean);
}

/** The got instance of attempts: everything but the target, the body and the headers is fixed here. */
export function createClient(
  agent: Agents,
  timeoutMs: number,
  request: (url: URL, options: http.RequestOptions) => http.ClientRequest = leanRequest,
): Got {
  return got.extend({
    request,
    method: "POST",
    agent,
    http2: false,
    followRedirect: false,
    retry: { limit: 0 },
    throwHttpErrors: false,
    decompress: false,
    dnsCache: false,
    cache: false,
    timeout: { request: timeoutMs },
  });
}

/** The DNS deadline when none is configured: well inside the attempt's timeout. */
export function defaultDnsTimeoutMs(attemptTimeoutMs: number): number {
  return Math.min(DEFAULT_DNS_TIMEOUT_MS, Math.floor(attemptTimeoutMs / 2));
}

export function createWebhookSender(options: SenderOptions): WebhookSender {
  const dnsTimeoutMs = options.dnsTimeoutMs ?? defaultDnsTimeoutMs(options.timeoutMs);
  const rules = { allowPrivate: options.allowPrivateTargets, dnsTimeoutMs };
  const resolver =
    options.resolver ??
    createDnsResolver({
      timeoutMs: dnsTimeoutMs,
      ...(options.dnsServers ? { servers: options.dnsServers } : {}),
    });
  const lookup = createSafeLookup(rules, resolver);
  const idleSocketMs = options.idleSocketMs ?? IDLE_SOCKET_MS;
  // Every connection, pooled or not, is made by an agent that carries the safe lookup.
  const pooled = {
    keepAlive: idleSocketMs > 0,
    timeout: idleSocketMs > 0 ? idleSocketMs : undefined,
    scheduling: "lifo" as const,
    lookup: lookup as never,
  };
  const fresh = { keepAlive: false, lookup: lookup as never };
  const agents = {
    pooled: { http: new http.Agent(pooled), https: new https.Agent(pooled) },
    fresh: { http: new http.Agent(fresh), https: new https.Agent(fresh) },
  };
  const clients = {
    pooled: createClient(agents.pooled, options.timeoutMs),
    fresh: createClient(agents.fresh, options.timeoutMs),
  };

  const targetOk = checkedTargets(options.allowPrivateTargets);

  const send = (request: WebhookRequest) =>
    new Promise<AttemptOutcome>((resolve) => {
      const started = performance.now();
      const elapsed = () => Math.round(performance.now() - started);
      if (!targetOk(request.url)) {
        resolve({ ok: false, statusCode: null, errorKind: "refused_target", durationMs: elapsed() });
        return;
      }
      // got parses the URL itself (from a URL object too, through its string).
      const { url } = request;
      const headers = { ...request.headers, "Content-Length": String(request.body.length) };
      let settled = false;
      const settle = (outcome: AttemptOutcome) => {
        if (settled) return;
        settled = true;
        resolve(outcome);
      };
      const fail = (error: unknown) =>
        settle({ ok: false, statusCode: null, errorKind: classifyError(error), durationMs: elapsed() });

      const attempt = (retry: boolean) => {
        // One deadline for the whole attempt (connect, TLS, request, status line), re-send included.
        const remaining = Math.floor(options.timeoutMs - (performance.now() - started));
        if (retry && remaining <= 0) {
          fail(timeoutError(options.timeoutMs));
          return;
        }
        const stream = retry
          ? clients.fresh.stream(url, { body: request.body, headers, timeout: { request: remaining } })
          : clients.pooled.stream(url, { body: request.body, headers });
        let responded = false;
        let timer: NodeJS.Timeout | undefined;
        stream.on("error", (error: Error & { code?: string }) => {
          clearTimeout(timer);
          if (settled || responded) return; // a broken body drain: the outcome is already known
          const stale = !retry && stream.reusedSocket === true && STALE_SOCKET_CODES.has(error.code ?? "");
          if (stale) attempt(true);
          else fail(error);
        });
        stream.on("response", (res: http.IncomingMessage) => {
          responded = true;
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) {
            settle({ ok: true, statusCode: status, errorKind: null, durationMs: elapsed() });
          } else {
            const kind: ErrorKind = status >= 300 && status < 400 ? "redirect" : "http_status";
            settle({ ok: false, statusCode: status, errorKind: kind, durationMs: elapsed() });
          }
          // Drain a small, quick body so the socket goes back to the pool; otherwise hang up.
          const declared = Number(res.headers["content-length"] ?? 0);
          if (declared > MAX_DRAINED_BODY_BYTES) {
            stream.destroy();
            return;
          }
          const left = options.timeoutMs - (performance.now() - started);
          timer = setTimeout(() => stream.destroy(), Math.max(0, Math.min(DRAIN_MS, left)));
          let received = 0;
          stream.on("data", (chunk: Buffer) => {
            received += chunk.length;
            if (received > MAX_DRAINED_BODY_BYTES) {
              clearTimeout(timer);
              stream.destroy();
            }
          });
          stream.once("end", () => clearTimeout(timer));
          stream.once("close", () => clearTimeout(timer));
        });
      };
      attempt(false);
    });

  return Object.assign(send, {
    close() {
      for (const set of [agents.pooled, agents.fresh]) {
        set.http.destroy();
        set.https.destroy();
      }
    },
  });
}
