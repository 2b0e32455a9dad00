/**
 * Webhook target rules (SSRF protection), shared by listing management (checks a URL when it is
 * set) and the dispatcher (checks the resolved address again at connect time).
 *
 * A target must be https on a public host. Refused: loopback, private (RFC 1918), unique-local,
 * link-local (incl. 169.254.169.254 metadata), CGNAT (100.64/10), multicast, broadcast,
 * unspecified, reserved/documentation/benchmarking ranges, and IPv6 forms that embed IPv4
 * (IPv4-mapped, NAT64, 6to4, Teredo). IPv4 spellings in decimal, octal and hex are normalised by the
 * WHATWG URL parser before they are classified, so `http://2130706433/` is 127.0.0.1.
 */

import type { LookupAddress } from "node:dns";
import { isIP } from "node:net";
// A static import (not createRequire) so that the apps' bundler sees the dependency.
import ipaddr from "ipaddr.js";
import {
  DEFAULT_DNS_TIMEOUT_MS,
  DnsLookupFailed,
  type Resolver,
  systemResolver,
  withDnsDeadline,
} from "./dns.js";

export type { Resolver } from "./dns.js";

export type AddressVerdict = { ok: true } | { ok: false; range: string };

/** Classifies one IP address (v4 or v6, no brackets). Anything not plain public unicast is refused. */
export function classifyAddress(ip: string): AddressVerdict {
  const bare = ip.startsWith("[") && ip.endsWith("]") ? ip.slice(1, -1) : ip;
  if (!ipaddr.isValid(bare)) return { ok: false, range: "invalid" };
  let addr = ipaddr.parse(bare.replace(/%.*$/, ""));
  if (addr.kind() === "ipv6") {
    const v6 = addr as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) addr = v6.toIPv4Address();
  }
  const range = addr.range();
  return range === "unicast" ? { ok: true } : { ok: false, range };
}

export function isIpLiteral(host: string): boolean {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  return ipaddr.IPv4.isValidFourPartDecimal(bare) || ipaddr.IPv6.isValid(bare);
}

const LOCAL_NAMES = /(^|\.)(localhost|localdomain|local|internal|home\.arpa)\.?$/i;
/** `localhost` and its subdomains are loopback by definition (RFC 6761); no DNS is asked. */
const LOOPBACK_NAMES = /(^|\.)localhost\.?$/i;
const LOOPBACK_ADDRESSES = ["127.0.0.1", "::1"];

export interface TargetRules {
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private/loopback hosts allowed (development, tests). */
  allowPrivate: boolean;
  /**
   * Deadline of one DNS lookup (WEBHOOK_DNS_TIMEOUT_MS; default DEFAULT_DNS_TIMEOUT_MS), applied
   * to whatever resolver is used, injected ones included.
   */
  dnsTimeoutMs?: number;
}

export class TargetRefused extends Error {
  readonly code = "ETARGETREFUSED";
}

export type UrlVerdict = { ok: true; url: string } | { ok: false; reason: string };

/**
 * Checks a webhook URL when it is set: it must parse, be https (http only when private targets
 * are allowed), carry no credentials, and name a public host. With a resolver, a host name whose
 * DNS answer includes a non-public address is refused; a name that does not resolve is accepted
 * here and checked again by the dispatcher at connect time.
 */
export async function checkWebhookUrl(
  raw: string,
  rules: TargetRules,
  resolver: Resolver | null = systemResolver,
): Promise<UrlVerdict> {
  if (typeof raw !== "string" || raw.length === 0)
    return { ok: false, reason: "The webhook URL is required." };
  if (raw.length > 2048)
    return { ok: false, reason: "The webhook URL must be at most 2048 characters long." };
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: "The webhook URL is not a valid URL." };
  }
  const schemeOk = url.protocol === "https:" || (rules.allowPrivate && url.protocol === "http:");
  if (!schemeOk) {
    // The sentence names what this deployment accepts: http is refused unless private targets are allowed.
    const accepted = rules.allowPrivate ? "http or https" : "https";
    return { ok: false, reason: `The webhook URL must use ${accepted}.` };
  }
  if (url.username || url.password) {
    return { ok: false, reason: "The webhook URL must not contain credentials." };
  }
  if (rules.allowPrivate) return { ok: true, url: url.toString() };
  const host = url.hostname;
  if (isIpLiteral(host)) {
    const verdict = classifyAddress(host);
    return verdict.ok ? { ok: true, url: url.toString() } : refusedHost(verdict.range);
  }
  if (LOCAL_NAMES.test(host) || !host.includes(".")) {
    return { ok: false, reason: "The webhook URL must name a public host." };
  }
  if (resolver) {
    let addresses: string[] = [];
    try {
      addresses = await withDnsDeadline(resolver, rules.dnsTimeoutMs ?? DEFAULT_DNS_TIMEOUT_MS)(host);
    } catch {
      addresses = []; // unresolvable now (or not within the deadline): checked again at connect time
    }
    for (const address of addresses) {
      const verdict = classifyAddress(address);
      if (!verdict.ok) return refusedHost(verdict.range);
    }
  }
  return { ok: true, url: url.toString() };
}

function refusedHost(range: string): UrlVerdict {
  return {
    ok: false,
    reason: `The webhook URL must name a public host (it points to a ${describeRange(range)} address).`,
  };
}

function describeRange(range: string): string {
  const names: Record<string, string> = {
    loopback: "loopback",
    private: "private",
    uniqueLocal: "private",
    linkLocal: "link-local",
    carrierGradeNat: "carrier-grade NAT",
    multicast: "multicast",
    broadcast: "broadcast",
    unspecified: "unspecified",
    invalid: "invalid",
  };
  return names[range] ?? "reserved";
}

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for http(s).Agent / got's `dnsLookup`: resolves the host once (asynchronously, under
 * the rules' DNS deadline), refuses the connection when any answer is not a public address, and
 * hands the socket exactly the addresses it checked, so there is no second resolution (no
 * DNS-rebinding window). With `all: true` (Node's Happy Eyeballs) every checked address is handed
 * over, A answers first; otherwise the first one.
 *
 * `localhost` (and `*.localhost`) is loopback without a query: allowed when private targets are,
 * refused otherwise. The asynchronous resolver does not read /etc/hosts, so other names that exist
 * only there do not resolve.
 */
export function createSafeLookup(rules: TargetRules, resolver: Resolver = systemResolver) {
  const resolve = withDnsDeadline(resolver, rules.dnsTimeoutMs ?? DEFAULT_DNS_TIMEOUT_MS);
  const answer = (hostname: string): Promise<string[]> =>
    LOOPBACK_NAMES.test(hostname) ? Promise.resolve(LOOPBACK_ADDRESSES) : resolve(hostname);
  return (hostname: string, options: unknown, callback: LookupCallback): void => {
    const cb = (typeof options === "function" ? options : callback) as LookupCallback;
    const wantsAll =
      typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
    answer(hostname).then(
      (addresses) => {
        if (addresses.length === 0) {
          cb(new DnsLookupFailed(hostname, "ENOTFOUND", `No address for ${hostname}.`), "", 4);
          return;
        }
        if (!rules.allowPrivate) {
          for (const address of addresses) {
            const verdict = classifyAddress(address);
            if (!verdict.ok) {
              cb(
                new TargetRefused(`Refused to connect to a ${describeRange(verdict.range)} address.`),
                "",
                4,
              );
              return;
            }
          }
        }
        const checked = addresses.map((address) => ({ address, family: isIP(address) === 6 ? 6 : 4 }));
        if (wantsAll) cb(null, checked);
        else {
          const first = checked[0] as LookupAddress;
          cb(null, first.address, first.family);
        }
      },
      (error: NodeJS.ErrnoException) => cb(error, "", 4),
    );
  };
}
