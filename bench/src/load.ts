import autocannon from "autocannon";

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  total: number;
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
}

export async function load(options: LoadOptions): Promise<LoadResult> {
  const result = await autocannon({
    url: options.url,
    connections: options.connections,
    duration: options.durationS,
    overallRate: options.overallRate,
    amount: options.amount,
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
  };
}
