import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:net";
import type { Resolver } from "@botdir/webhook-targets";
import { type DispatcherHarness, type Receiver, startDispatcherHarness } from "./support.js";

// Answers for made-up host names; anything else does not resolve.
const fakeDns: Record<string, string[]> = {
  "hooks.rebind.example": ["127.0.0.1"],
  "metadata.example": ["203.0.113.9", "169.254.169.254"],
  "dev-box.example": ["127.0.0.1"],
  "public.example": ["93.184.215.14"],
};
const resolver: Resolver = async (host) => {
  const answer = fakeDns[host];
  if (!answer) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
  return answer;
};

// Two harnesses: one under production rules (https only, public addresses only), one allowing
// private targets.
let strict: DispatcherHarness;
let lenient: DispatcherHarness;
let tcp: Server;
let tcpPort: number;
let connections = 0;
let receiver: Receiver;

beforeAll(async () => {
  [strict, lenient] = await Promise.all([
    startDispatcherHarness({ workers: [{ allowPrivateTargets: false, resolver }] }),
    startDispatcherHarness({ workers: [{ allowPrivateTargets: true, resolver }] }),
  ]);
  // A raw TCP listener on loopback: any connection at all to it would be counted.
  tcp = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
  tcpPort = (tcp.address() as AddressInfo).port;
  receiver = await lenient.receiver(() => ({ status: 204 }));
});

afterAll(async () => {
  await Promise.all([strict.close(), lenient.close()]);
  await new Promise<void>((resolve) => tcp.close(() => resolve()));
});

async function deliverTo(url: string, h: DispatcherHarness, finalState: "delivered" | "failed") {
  const { delivery } = await h.arrange(url, { secret: "secret" });
  await h.handOff(delivery);
  await h.waitForState(delivery.id, finalState);
  return h.attempts(delivery.id);
}

describe("SSRF checks at connect time", () => {
  it.each([
    ["a loopback IP literal", () => `https://127.0.0.1:${tcpPort}/hook`],
    ["a decimal IPv4 spelling of loopback", () => `https://2130706433:${tcpPort}/hook`],
    ["an IPv4-mapped IPv6 loopback", () => `https://[::ffff:127.0.0.1]:${tcpPort}/hook`],
    ["a host whose DNS answer is loopback", () => `https://hooks.rebind.example:${tcpPort}/hook`],
    ["a host with one link-local (metadata) answer", () => `https://metadata.example:${tcpPort}/hook`],
    ["plain http to a public host", () => `http://public.example:${tcpPort}/hook`],
  ])(
    "when the webhook names %s, then every attempt is refused_target and no connection is made",
    async (_name, url) => {
      const before = connections;
      const attempts = await deliverTo(url(), strict, "failed");

      expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual(
        [1, 2, 3, 4, 5].map((n) => [n, null, "refused_target"]),
      );
      expect(connections).toBe(before);
    },
  );

  it("when the host does not resolve, then the attempt fails with error kind dns", async () => {
    const attempts = await deliverTo("https://nowhere.example/hook", strict, "failed");
    expect(attempts.map((a) => a.errorKind)).toEqual(["dns", "dns", "dns", "dns", "dns"]);
  });

  it("when private targets are allowed, then the request goes to the address the checked lookup returned", async () => {
    const port = new URL(receiver.url()).port;
    const attempts = await deliverTo(`http://dev-box.example:${port}/hook`, lenient, "delivered");

    expect(attempts.map((a) => [a.statusCode, a.errorKind])).toEqual([[204, null]]);
    expect(receiver.requests).toHaveLength(1);
    expect(receiver.requests[0]!.headers.host).toBe(`dev-box.example:${port}`);
  });
});
