/**
 * One HTTP attempt of a webhook delivery: POST the signed bytes, look only at the status line, and
 * classify the outcome. got with its own retries and redirects off and a hard timeout; the target is
 * checked for SSRF at connect time (see @botdir/schema net.ts).
 */
import { performance } from "node:perf_hooks";
import {
  classifyAddress,
  createSafeLookup,
  isIpLiteral,
  type Resolver,
  systemResolver,
} from "@botdir/schema";
import { got } from "got";

/** Why an attempt failed; null in the attempt log means delivered. */
export type ErrorKind =
  | "http_status"
  | "redirect"
  | "timeout"
  | "connection"
  | "tls"
  | "dns"
  | "refused_target"
  | "interrupted";

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
  /** Tests inject a resolver to simulate DNS answers. */
  resolver?: Resolver;
}

export type WebhookSender = (request: WebhookRequest) => Promise<AttemptOutcome>;

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
const DNS_CODES = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "ENODATA"]);

/** Maps a got / Node error to an error kind. */
export function classifyError(error: unknown): ErrorKind {
  const e = error as { name?: string; code?: string; cause?: unknown } | null;
  const codes = [e?.code, (e?.cause as { code?: string } | undefined)?.code].filter(Boolean) as string[];
  if (codes.includes("ETARGETREFUSED")) return "refused_target";
  if (e?.name === "TimeoutError" || codes.includes("ETIMEDOUT")) return "timeout";
  if (codes.some((c) => DNS_CODES.has(c))) return "dns";
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

export function createWebhookSender(options: SenderOptions): WebhookSender {
  const rules = { allowPrivate: options.allowPrivateTargets };
  const dnsLookup = createSafeLookup(rules, options.resolver ?? systemResolver);

  return (request) =>
    new Promise<AttemptOutcome>((resolve) => {
      const started = performance.now();
      const elapsed = () => Math.round(performance.now() - started);
      const target = checkTarget(request.url, options.allowPrivateTargets);
      if (!target.ok) {
        resolve({ ok: false, statusCode: null, errorKind: "refused_target", durationMs: elapsed() });
        return;
      }
      let settled = false;
      const settle = (outcome: AttemptOutcome) => {
        if (settled) return;
        settled = true;
        stream.destroy();
        resolve(outcome);
      };
      const stream = got.stream.post(target.url, {
        body: request.body,
        headers: request.headers,
        followRedirect: false,
        throwHttpErrors: false,
        retry: { limit: 0 },
        timeout: { request: options.timeoutMs },
        dnsLookup: dnsLookup as never,
        decompress: false,
        http2: false,
      });
      // Only the status line matters: the body is never read, so a huge or slow-dripping reply
      // costs nothing. Headers are bounded by Node's max header size and by the timeout.
      stream.once("response", (response: { statusCode: number }) => {
        const status = response.statusCode;
        if (status >= 200 && status < 300) {
          settle({ ok: true, statusCode: status, errorKind: null, durationMs: elapsed() });
        } else {
          const kind: ErrorKind = status >= 300 && status < 400 ? "redirect" : "http_status";
          settle({ ok: false, statusCode: status, errorKind: kind, durationMs: elapsed() });
        }
      });
      stream.once("error", (error: unknown) => {
        settle({ ok: false, statusCode: null, errorKind: classifyError(error), durationMs: elapsed() });
      });
      // got.stream wants a consumer; the data is discarded as soon as a response arrives.
      stream.resume();
    });
}
