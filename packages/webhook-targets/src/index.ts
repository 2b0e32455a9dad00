export type { DnsResolverOptions, Resolver } from "./dns.js";
export {
  createDnsResolver,
  DEFAULT_DNS_TIMEOUT_MS,
  DnsLookupFailed,
  isDnsServerAddress,
  systemResolver,
  withDnsDeadline,
} from "./dns.js";
export type { AddressVerdict, TargetRules, UrlVerdict } from "./net.js";
export { checkWebhookUrl, classifyAddress, createSafeLookup, isIpLiteral, TargetRefused } from "./net.js";
export type { WebhookSigning } from "./request.js";
export { signedWebhookRequest } from "./request.js";
