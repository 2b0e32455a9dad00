/**
 * The limit is exact while Redis is healthy, however late our own event loop is: the API runs
 * in-process, on a real listener, with a CPU-bound task beside it that holds the loop for 120 ms
 * at every turn, after the poll phase (longer than the limiter's 50 ms deadline). Redis answers in time, its reply waits
 * in the socket behind the task, and the limiter must read it rather than call Redis slow.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { seedBot } from "@botdir/db/testing";
import { createApiMetrics } from "../../../apps/api/src/metrics.js";
import { apiOn } from "../../src/in-process.js";
import { useStores } from "../../src/stack.js";

const LIMIT = 20;
const REQUESTS = 30;
const HOG_MS = 120;

const t = useStores();

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {}
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function seriesValue(metrics: ReturnType<typeof createApiMetrics>, name: string): Promise<number> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return (metric?.values ?? []).reduce((sum, v) => sum + v.value, 0);
}

describe("limiter under a starved event loop", () => {
  it("when a CPU-bound task holds the loop past the deadline while Redis is healthy, then the limit holds exactly and nothing fails open", async () => {
    const metrics = createApiMetrics();
    const server = createServer(apiOn(t, { metrics, limits: { check: LIMIT } }));
    const base = await listen(server);
    t.beforeClose(() => new Promise((resolve) => server.close(resolve)));
    const bot = await seedBot(t.db);
    const url = `${base}/api/v1/bots/${bot.id}/check?userId=123456789012345678`;

    // In the check phase, after the poll phase that sent the limiter's call: the next timers
    // phase finds its deadline passed before the poll phase can read Redis's reply.
    let hogging = true;
    const hog = () => {
      busy(HOG_MS);
      if (hogging) setImmediate(hog);
    };
    setImmediate(hog);
    let statuses: number[];
    try {
      statuses = await Promise.all(
        Array.from({ length: REQUESTS }, () =>
          fetch(url, { headers: { Authorization: bot.token ?? "" } }).then(async (res) => {
            await res.arrayBuffer();
            return res.status;
          }),
        ),
      );
    } finally {
      hogging = false;
    }

    expect(statuses.filter((s) => s === 200)).toHaveLength(LIMIT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(REQUESTS - LIMIT);
    // Neither failed open nor counted alone: Redis answered every decision.
    expect(await seriesValue(metrics, "botdir_rate_limit_fail_open_total")).toBe(0);
    expect(await seriesValue(metrics, "botdir_rate_limit_local_fallback_total")).toBe(0);
  });
});
