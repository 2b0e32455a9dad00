/**
 * Resolving webhook host names without blocking, under a deadline.
 *
 * `dns.lookup` (getaddrinfo) runs on libuv's thread pool (4 threads unless UV_THREADPOOL_SIZE says
 * otherwise): a host whose nameserver drops queries holds a thread for the resolver's whole retry
 * cycle, and four such lookups stall every other lookup of the process (and its file system and
 * crypto work). The resolver here is `dns.promises.Resolver` (c-ares): queries are UDP packets on
 * the event loop, no thread is held, and every lookup ends by its deadline.
 *
 * - A and AAAA are asked for in parallel; every answer is returned (the caller checks each one).
 *   When one family has answered, the other gets FAMILY_GRACE_MS more (the "resolution delay" of
 *   Happy Eyeballs, RFC 8305) instead of the whole deadline.
 * - IP literals are returned as they are, without a query.
 * - Failure, no answer or the deadline all reject with DnsLookupFailed (code `EDNS`), which the
 *   dispatcher records as error kind `dns`.
 * - c-ares reads the nameservers of /etc/resolv.conf (or `servers`), **not /etc/hosts**: names that
 *   exist only there do not resolve. `localhost` is handled by the caller (net.ts).
 */
import { promises as dnsPromises } from "node:dns";
import { isIP } from "node:net";

/** Resolves every A/AAAA answer of a host name (addresses, unchecked). */
export type Resolver = (hostname: string) => Promise<string[]>;

/** The lookup deadline when none is configured (WEBHOOK_DNS_TIMEOUT_MS). */
export const DEFAULT_DNS_TIMEOUT_MS = 3_000;

/** How long the second address family may lag behind the first one's answer. */
export const FAMILY_GRACE_MS = 50;

/** A host name that did not resolve: no such name, no address, a failing server, or the deadline. */
export class DnsLookupFailed extends Error {
  override readonly name = "DnsLookupFailed";
  /** Recognised by the dispatcher's error classification (error kind `dns`). */
  readonly code = "EDNS";

  constructor(
    readonly hostname: string,
    /** The resolver's code (ENOTFOUND, ESERVFAIL, ECONNREFUSED …), or ETIMEOUT for the deadline. */
    readonly reason: string,
    message = `DNS lookup of ${hostname} failed (${reason}).`,
  ) {
    super(message);
  }
}

/** Rejects with DnsLookupFailed(ETIMEOUT) when `resolver` has not answered within `timeoutMs`. */
export function withDnsDeadline(resolver: Resolver, timeoutMs: number): Resolver {
  return (hostname) =>
    new Promise<string[]>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new DnsLookupFailed(
              hostname,
              "ETIMEOUT",
              `No DNS answer for ${hostname} within ${timeoutMs} ms.`,
            ),
          ),
        timeoutMs,
      );
      resolver(hostname).then(
        (addresses) => {
          clearTimeout(timer);
          resolve(addresses);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
}

/** `ip`, `ip:port`, `[ipv6]` or `[ipv6]:port`: what Resolver#setServers accepts. */
export function isDnsServerAddress(value: string): boolean {
  const v = value.trim();
  if (isIP(v)) return true;
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(v);
  if (bracketed) return isIP(bracketed[1] ?? "") === 6 && portOk(bracketed[2]);
  const v4 = /^([\d.]+):(\d{1,5})$/.exec(v);
  return v4 !== null && isIP(v4[1] ?? "") === 4 && portOk(v4[2]);
}

function portOk(port: string | undefined): boolean {
  return port === undefined || (Number(port) >= 1 && Number(port) <= 65_535);
}

export interface DnsResolverOptions {
  /** Deadline of one lookup (A and AAAA together); default DEFAULT_DNS_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Nameservers to ask instead of /etc/resolv.conf's (WEBHOOK_DNS_SERVERS), e.g. `10.0.0.2:53`. */
  servers?: readonly string[];
}

const NO_SUCH_NAME = new Set(["ENODATA", "ENOTFOUND"]);

/** The asynchronous resolver (c-ares) with a deadline; see the file comment. */
export function createDnsResolver(options: DnsResolverOptions = {}): Resolver {
  const timeoutMs = options.timeoutMs ?? DEFAULT_DNS_TIMEOUT_MS;
  // c-ares' own retries end about at the deadline too (first try a third of it, the retry twice
  // that), so an abandoned query does not linger; the deadline itself is withDnsDeadline's.
  const resolver = new dnsPromises.Resolver({ timeout: Math.max(50, Math.floor(timeoutMs / 3)), tries: 2 });
  if (options.servers && options.servers.length > 0) resolver.setServers([...options.servers]);

  const query: Resolver = (hostname) => {
    if (isIP(hostname)) return Promise.resolve([hostname]);
    return new Promise<string[]>((resolve, reject) => {
      type Answer = { addresses: string[] } | { error: NodeJS.ErrnoException };
      const answers: { v4?: Answer; v6?: Answer } = {};
      let grace: NodeJS.Timeout | undefined;
      let settled = false;
      const addressesOf = (a?: Answer) => (a && "addresses" in a ? a.addresses : []);
      const finish = () => {
        if (settled) return;
        const found = [...addressesOf(answers.v4), ...addressesOf(answers.v6)];
        if (found.length > 0) {
          settled = true;
          clearTimeout(grace);
          resolve(found);
          return;
        }
        if (!answers.v4 || !answers.v6) return;
        settled = true;
        const codes = [answers.v4, answers.v6].map((a) =>
          "error" in a ? (a.error.code ?? "EDNS") : "ENODATA",
        );
        const reason = codes.every((c) => NO_SUCH_NAME.has(c))
          ? "ENOTFOUND"
          : (codes.find((c) => !NO_SUCH_NAME.has(c)) ?? "ENOTFOUND");
        reject(new DnsLookupFailed(hostname, reason));
      };
      const settle = (family: "v4" | "v6") => (answer: Answer) => {
        answers[family] = answer;
        const other = family === "v4" ? answers.v6 : answers.v4;
        if (other || settled) return finish();
        if (addressesOf(answer).length > 0) grace ??= setTimeout(finish, FAMILY_GRACE_MS);
      };
      resolver.resolve4(hostname).then(
        (addresses) => settle("v4")({ addresses }),
        (error: NodeJS.ErrnoException) => settle("v4")({ error }),
      );
      resolver.resolve6(hostname).then(
        (addresses) => settle("v6")({ addresses }),
        (error: NodeJS.ErrnoException) => settle("v6")({ error }),
      );
    });
  };
  return withDnsDeadline(query, timeoutMs);
}

/**
 * The resolver of the host's nameservers with the default deadline. (Before, this name was a
 * `dns.lookup` wrapper; it keeps the name so callers need not change.)
 */
export const systemResolver: Resolver = createDnsResolver();
