import { Agent, request as httpRequest } from "node:http";
import autocannon from "autocannon";

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  total: number;
  /** Answers by status code (load() fills it; not averaged). */
  statuses?: Record<string, number>;
}

export interface LoadOptions {
  url: string;
  method?: "GET" | "POST" | "PUT";
  durationS: number;
  connections: number;
  /** Builds each request: path, headers and body (so tokens and user ids vary). */
  request: () => { path: string; headers?: Record<string, string>; body?: string };
  overallRate?: number;
  /** Stop after this many requests instead of after durationS. */
  amount?: number;
  /** Seconds before a request counts as timed out (autocannon's default 10). */
  timeoutS?: number;
}

export async function load(options: LoadOptions): Promise<LoadResult> {
  const result = await autocannon({
    url: options.url,
    connections: options.connections,
    duration: options.durationS,
    overallRate: options.overallRate,
    amount: options.amount,
    ...(options.timeoutS === undefined ? {} : { timeout: options.timeoutS }),
    requests: [
      {
        method: options.method ?? "GET",
        setupRequest: (req) => {
          const r = options.request();
          return {
            ...req,
            method: options.method ?? "GET",
            path: r.path,
            headers: { ...(r.headers ?? {}), ...(r.body ? { "content-type": "application/json" } : {}) },
            body: r.body,
          };
        },
      },
    ],
  });
  return {
    rps: Math.round(result.requests.average),
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    total: result.requests.total,
    statuses: Object.fromEntries(
      Object.entries(result.statusCodeStats ?? {}).map(([status, stat]) => [status, stat.count ?? 0]),
    ),
  };
}

/** The mean of each figure over rounds (totals summed). */
export function average(results: LoadResult[]): LoadResult {
  const n = results.length;
  const sum = (k: Exclude<keyof LoadResult, "statuses">) => results.reduce((a, r) => a + r[k], 0);
  return {
    rps: Math.round(sum("rps") / n),
    p50: Math.round((sum("p50") / n) * 10) / 10,
    p99: Math.round((sum("p99") / n) * 10) / 10,
    non2xx: sum("non2xx"),
    errors: sum("errors"),
    total: sum("total"),
  };
}

/**
 * POSTs JSON bodies over up to `connections` keep-alive connections without waiting for the
 * answers: `post` resolves with the milliseconds until its answer ended (null when the request
 * failed); `drain` waits for every request in flight, then closes the connections.
 */
export function jsonPoster(url: string, connections: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const { hostname, port } = new URL(url);
  const inFlight = new Set<Promise<number | null>>();
  return {
    post(path: string, headers: Record<string, string> | undefined, body: string): Promise<number | null> {
      const t0 = performance.now();
      const done = new Promise<number | null>((resolve) => {
        const req = httpRequest(
          {
            agent,
            host: hostname,
            port,
            method: "POST",
            path,
            headers: {
              ...headers,
              "content-type": "application/json",
              "content-length": Buffer.byteLength(body),
            },
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve(performance.now() - t0));
            res.on("error", () => resolve(null));
          },
        );
        req.on("error", () => resolve(null));
        req.end(body);
      }).finally(() => inFlight.delete(done));
      inFlight.add(done);
      return done;
    },
    async drain(): Promise<void> {
      await Promise.all(inFlight);
      agent.destroy();
    },
  };
}

/**
 * Sends `rate` POSTs per second at an even pace (one every 1000/rate ms) for `durationS` seconds
 * over up to `connections` keep-alive connections. autocannon's overallRate is not a steady rate: each
 * connection sends its share of the second back to back and then idles until the second is over, so
 * "500/s" arrives as bursts at the server's full speed followed by silence.
 */
export async function paced(
  url: string,
  rate: number,
  durationS: number,
  connections: number,
  request: LoadOptions["request"],
): Promise<void> {
  const poster = jsonPoster(url, connections);
  const send = () => {
    const r = request();
    void poster.post(r.path, r.headers, r.body ?? "");
  };
  const total = Math.round(rate * durationS);
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    for (; sent < due; sent++) send();
    await new Promise((r) => setTimeout(r, 1));
  }
  await poster.drain();
}
