/**
 * The fault proxy the failover suite slows and stalls links with: bytes pass unchanged and in
 * order, a delay holds each chunk that long, a stall holds everything until it ends, a cut resets
 * the open connections while new ones are still accepted.
 */
import { connect, createServer, type Server, type Socket } from "node:net";
import { type FaultProxy, startFaultProxy } from "../src/index.js";

let echo: Server;
let proxy: FaultProxy;

beforeAll(async () => {
  echo = createServer((socket) => socket.pipe(socket));
  await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", () => resolve()));
  const address = echo.address();
  if (typeof address !== "object" || !address) throw new Error("no port");
  proxy = await startFaultProxy(address.port);
});

afterAll(async () => {
  await proxy.close();
  await new Promise((resolve) => echo.close(resolve));
});

afterEach(() => proxy.setDelay(0));

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(proxy.port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Sends `text` and resolves with the echo once all of it is back, and how long that took. */
function roundTrip(socket: Socket, text: string): Promise<{ text: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    let got = "";
    const onData = (chunk: Buffer) => {
      got += chunk.toString();
      if (got.length >= text.length) {
        socket.off("data", onData);
        resolve({ text: got, ms: performance.now() - started });
      }
    };
    socket.on("data", onData);
    socket.write(text);
  });
}

describe("fault proxy", () => {
  it("when nothing is set, then bytes pass through unchanged and in order", async () => {
    const socket = await open();
    const text = Array.from({ length: 200 }, (_, i) => `line ${i}\n`).join("");
    expect((await roundTrip(socket, text)).text).toBe(text);
    socket.destroy();
  });

  it("when a delay is set, then each way holds the bytes at least that long", async () => {
    const socket = await open();
    proxy.setDelay(100);
    const { text, ms } = await roundTrip(socket, "ping");
    expect(text).toBe("ping");
    // There and back: 100 ms each way.
    expect(ms).toBeGreaterThanOrEqual(190);
    socket.destroy();
  });

  it("when the link is stalled, then nothing passes until the stall ends, then everything in order", async () => {
    const socket = await open();
    const stalled = proxy.stall(300);
    const started = performance.now();
    const back = roundTrip(socket, "abc");
    await stalled;
    const { text } = await back;
    expect(text).toBe("abc");
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    socket.destroy();
  });

  it("when the link is cut, then open connections are reset and a new one works", async () => {
    const socket = await open();
    const closed = new Promise<string>((resolve) => {
      socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"));
      socket.once("close", () => resolve("closed"));
    });
    proxy.cut();
    expect(["ECONNRESET", "closed"]).toContain(await closed);
    const again = await open();
    expect((await roundTrip(again, "still here")).text).toBe("still here");
    again.destroy();
  });
});
