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
import { lookup as dnsLookup } from "node:dns";
import { createRequire } from "node:module";

type IpaddrModule = typeof import("ipaddr.js");
const ipaddr = createRequire(import.meta.url)("ipaddr.js") as IpaddrModule;

export type AddressVerdict = { ok: true } | { ok: false; range: string };

/** Classifies one IP address (v4 or v6, no brackets). Anything not plain public unicast is refused. */
export function classifyAddress(ip: string): AddressVerdict {
  const bare = ip.startsWith("[") && ip.endsWith("]") ? ip.slice(1, -1) : ip;
  if (!ipaddr.isValid(bare)) return { ok: false, range: "invalid" };
  let addr = ipaddr.parse(bare.replace(/%.*$/, ""));
  if (addr.kind() === "ipv6") {
    const v6 = addr as InstanceType<IpaddrModule["IPv6"]>;
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

export interface TargetRules {
  /** WEBHOOK_ALLOW_PRIVATE_TARGETS: http and private/loopback hosts allowed (development, tests). */
  allowPrivate: boolean;
}

export type Resolver = (hostname: string) => Promise<string[]>;

/** Resolves every A/AAAA answer of a host name with the system resolver. */
export const systemResolver: Resolver = (hostname) =>
  new Promise((resolve, reject) => {
    dnsLookup(hostname, { all: true, verbatim: true }, (error, addresses) => {
      if (error) reject(error);
      else resolve((addresses as LookupAddress[]).map((a) => a.address));
    });
  });

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
  if (!schemeOk) return { ok: false, reason: "The webhook URL must use https." };
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
      addresses = await resolver(host);
    } catch {
      addresses = []; // unresolvable now: the dispatcher checks again when it connects
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
 * A `lookup` for http(s).Agent / got's `dnsLookup`: resolves the host once, refuses the
 * connection when any answer is not a public address, and hands the socket exactly the address it
 * checked, so there is no second resolution (no DNS-rebinding window).
 */
export function createSafeLookup(rules: TargetRules, resolver: Resolver = systemResolver) {
  return (hostname: string, options: unknown, callback: LookupCallback): void => {
    const cb = (typeof options === "function" ? options : callback) as LookupCallback;
    const wantsAll =
      typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
    resolver(hostname).then(
      (addresses) => {
        if (addresses.length === 0) {
          cb(Object.assign(new Error(`No address for ${hostname}`), { code: "ENOTFOUND" }), "", 4);
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
        const chosen = addresses[0] as string;
        const family = chosen.includes(":") ? 6 : 4;
        if (wantsAll) cb(null, [{ address: chosen, family }]);
        else cb(null, chosen, family);
      },
      (error: NodeJS.ErrnoException) => cb(error, "", 4),
    );
  };
}
