import { performance } from "node:perf_hooks";
import {
  createDnsResolver,
  DnsLookupFailed,
  isDnsServerAddress,
  type Resolver,
  withDnsDeadline,
} from "./dns.js";
import { checkWebhookUrl, createSafeLookup } from "./net.js";
import { type DnsTestServer, startDnsServer } from "./testing.js";

let server: DnsTestServer;
beforeAll(async () => {
  server = await startDnsServer((name) => {
    if (name === "both.test") return ["93.184.216.34", "2606:4700:4700::1111"];
    if (name === "v4only.test") return ["93.184.216.35"];
    if (name === "loop.test") return ["127.0.0.1"];
    if (name.endsWith(".blackhole.test")) return "drop";
    return undefined;
  });
});
afterAll(() => server.close());

const never: Resolver = () => new Promise(() => {});

async function failure(promise: Promise<unknown>): Promise<DnsLookupFailed> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(DnsLookupFailed);
  return error as DnsLookupFailed;
}

describe("createDnsResolver (c-ares, a local nameserver on loopback)", () => {
  it("when a name has A and AAAA records, then both are returned, A first", async () => {
    const resolve = createDnsResolver({ servers: [server.address], timeoutMs: 2_000 });
    expect(await resolve("both.test")).toEqual(["93.184.216.34", "2606:4700:4700::1111"]);
    expect(server.queries).toEqual(expect.arrayContaining(["both.test A", "both.test AAAA"]));
  });

  it("when a name has only an A record, then its address is returned", async () => {
    const resolve = createDnsResolver({ servers: [server.address], timeoutMs: 2_000 });
    expect(await resolve("v4only.test")).toEqual(["93.184.216.35"]);
  });

  it("when a name does not exist, then the lookup fails as ENOTFOUND at once", async () => {
    const resolve = createDnsResolver({ servers: [server.address], timeoutMs: 20_000 });
    const started = performance.now();
    const error = await failure(resolve("missing.test"));
    expect([error.code, error.reason]).toEqual(["EDNS", "ENOTFOUND"]);
    // Milliseconds expected; "at once" means well before the 20 s deadline.
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it("when the nameserver never answers, then the lookup fails as ETIMEOUT at the deadline, and other lookups answer meanwhile", async () => {
    const deadlineMs = 3_000;
    const resolve = createDnsResolver({ servers: [server.address], timeoutMs: deadlineMs });
    const started = performance.now();
    const stuck = Array.from({ length: 20 }, (_, i) => failure(resolve(`h${i}.blackhole.test`)));
    // Twenty dropped queries hold no thread: a good name still answers at once (milliseconds; the
    // bound is half the deadline the stuck ones wait for).
    expect(await resolve("v4only.test")).toEqual(["93.184.216.35"]);
    expect(performance.now() - started).toBeLessThan(deadlineMs / 2);
    const errors = await Promise.all(stuck);
    const elapsed = performance.now() - started;
    expect(errors.every((e) => e.reason === "ETIMEOUT")).toBe(true);
    expect(elapsed).toBeGreaterThanOrEqual(deadlineMs - 10);
    // At the deadline, not after c-ares' own retries (several times the deadline).
    expect(elapsed).toBeLessThan(deadlineMs * 2);
  });

  it("when the host is an IP literal, then it is returned without a query", async () => {
    const before = server.queries.length;
    const resolve = createDnsResolver({ servers: [server.address] });
    expect(await resolve("93.184.216.34")).toEqual(["93.184.216.34"]);
    expect(server.queries.length).toBe(before);
  });
});

describe("withDnsDeadline", () => {
  it("when the wrapped resolver never answers, then the lookup fails as DnsLookupFailed ETIMEOUT after the deadline", async () => {
    const started = performance.now();
    const error = await failure(withDnsDeadline(never, 100)("x.example"));
    expect(error.reason).toBe("ETIMEOUT");
    expect(performance.now() - started).toBeGreaterThanOrEqual(95);
  });
});

describe("the deadline where names are checked", () => {
  function run(lookup: ReturnType<typeof createSafeLookup>, host: string, options: object = {}) {
    return new Promise<{ error: NodeJS.ErrnoException | null; address: unknown }>((resolve) => {
      lookup(host, options, (error, address) => resolve({ error, address }));
    });
  }

  it("when an injected resolver never answers at connect time, then the lookup fails as EDNS within the rules' deadline", async () => {
    const started = performance.now();
    const result = await run(
      createSafeLookup({ allowPrivate: false, dnsTimeoutMs: 150 }, never),
      "slow.example",
    );
    expect(result.error?.code).toBe("EDNS");
    expect(performance.now() - started).toBeLessThan(1_500); // ten times the 150 ms deadline
  });

  it("when an injected resolver never answers while a URL is saved, then the URL is accepted after the deadline (checked again at connect time)", async () => {
    const started = performance.now();
    const verdict = await checkWebhookUrl(
      "https://slow.example/hook",
      { allowPrivate: false, dnsTimeoutMs: 150 },
      never,
    );
    expect(verdict.ok).toBe(true);
    expect(performance.now() - started).toBeLessThan(1_500); // ten times the 150 ms deadline
  });

  it("when a name resolves to loopback through the real resolver, then production rules refuse it", async () => {
    const resolve = createDnsResolver({ servers: [server.address] });
    const result = await run(createSafeLookup({ allowPrivate: false }, resolve), "loop.test");
    expect(result.error?.code).toBe("ETARGETREFUSED");
    expect((await checkWebhookUrl("https://loop.test/x", { allowPrivate: false }, resolve)).ok).toBe(false);
  });

  it("when the host is localhost, then it is loopback without a query: allowed only when private targets are", async () => {
    const before = server.queries.length;
    const resolve = createDnsResolver({ servers: [server.address] });
    const allowed = await run(createSafeLookup({ allowPrivate: true }, resolve), "localhost", { all: true });
    expect(allowed.address).toEqual([
      { address: "127.0.0.1", family: 4 },
      { address: "::1", family: 6 },
    ]);
    const refused = await run(createSafeLookup({ allowPrivate: false }, resolve), "api.localhost");
    expect(refused.error?.code).toBe("ETARGETREFUSED");
    expect(server.queries.length).toBe(before);
  });
});

describe("isDnsServerAddress", () => {
  it.each(["10.0.0.2", "127.0.0.1:5353", "::1", "[::1]:53", "[2001:db8::1]"])("accepts %s", (v) => {
    expect(isDnsServerAddress(v)).toBe(true);
  });
  it.each(["dns.example", "10.0.0.2:99999", "10.0.0:53", "[10.0.0.2]:53", ""])("refuses %s", (v) => {
    expect(isDnsServerAddress(v)).toBe(false);
  });
});
