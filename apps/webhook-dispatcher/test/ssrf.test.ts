import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:net";
import { createTestDatabase, seedBot, type TestDatabase, testRedisPrefix } from "@botdir/db/testing";
import type { Resolver } from "@botdir/webhook-targets";
import {
  attemptRows,
  configureWebhook,
  handOff,
  openQueue,
  type Receiver,
  type StartedWorker,
  seedDelivery,
  startReceiver,
  startWorker,
  testConfig,
  waitForState,
} from "./support.js";

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

let t: TestDatabase;
let strictQueue: ReturnType<typeof openQueue>;
let lenientQueue: ReturnType<typeof openQueue>;
let strict: StartedWorker;
let lenient: StartedWorker;
let tcp: Server;
let tcpPort: number;
let connections = 0;
let receiver: Receiver;

beforeAll(async () => {
  t = await createTestDatabase();
  const strictPrefix = testRedisPrefix();
  const lenientPrefix = testRedisPrefix();
  strictQueue = openQueue(strictPrefix);
  lenientQueue = openQueue(lenientPrefix);
  // Production rules: https only, public addresses only.
  strict = await startWorker(t.db, testConfig(strictPrefix, { allowPrivateTargets: false, resolver }));
  lenient = await startWorker(t.db, testConfig(lenientPrefix, { allowPrivateTargets: true, resolver }));
  // A raw TCP listener on loopback: any connection at all to it would be counted.
  tcp = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
  tcpPort = (tcp.address() as AddressInfo).port;
  receiver = await startReceiver(() => ({ status: 204 }));
});

afterAll(async () => {
  await strict.close();
  await lenient.close();
  await strictQueue.close();
  await lenientQueue.close();
  await receiver.close();
  await new Promise<void>((resolve) => tcp.close(() => resolve()));
  await t.drop();
});

async function deliverTo(
  url: string,
  queue: ReturnType<typeof openQueue>,
  finalState: "delivered" | "failed",
) {
  const bot = await seedBot(t.db);
  await configureWebhook(t.db, bot.id, url, "secret");
  const delivery = await seedDelivery(t.db, bot.id);
  await handOff(queue.queue, delivery);
  await waitForState(t.db, delivery.id, finalState);
  return attemptRows(t.db, delivery.id);
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
      const attempts = await deliverTo(url(), strictQueue, "failed");

      expect(attempts.map((a) => [a.attemptNumber, a.statusCode, a.errorKind])).toEqual(
        [1, 2, 3, 4, 5].map((n) => [n, null, "refused_target"]),
      );
      expect(connections).toBe(before);
    },
  );

  it("when the host does not resolve, then the attempt fails with error kind dns", async () => {
    const attempts = await deliverTo("https://nowhere.example/hook", strictQueue, "failed");
    expect(attempts.map((a) => a.errorKind)).toEqual(["dns", "dns", "dns", "dns", "dns"]);
  });

  it("when private targets are allowed, then the request goes to the address the checked lookup returned", async () => {
    const port = new URL(receiver.url()).port;
    const attempts = await deliverTo(`http://dev-box.example:${port}/hook`, lenientQueue, "delivered");

    expect(attempts.map((a) => [a.statusCode, a.errorKind])).toEqual([[204, null]]);
    expect(receiver.requests).toHaveLength(1);
    expect(receiver.requests[0]!.headers.host).toBe(`dev-box.example:${port}`);
  });
});
