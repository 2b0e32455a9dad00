/**
 * Prometheus plumbing shared by the three apps (prom-client): a registry per app instance (never
 * the global default registry, so tests can build several apps in one process), the HTTP request
 * series fed by `requestLog`, the route label, the /metrics handler and a bounded scrape-time
 * read for gauges that ask PostgreSQL or Redis.
 *
 * Every series is named `botdir_*`; every series of a registry carries `app="<name>"`.
 */
import type { Request, RequestHandler, Response } from "express";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { withLoopTimeout } from "./timeout.js";

export { Counter, Gauge, Histogram, Registry };

export interface MetricsRegistryOptions {
  /**
   * Node.js process series (CPU, memory, event-loop lag, GC): main.ts turns them on; tests leave
   * them off, since each registry with them starts its own event-loop monitor.
   */
  processMetrics?: boolean;
}

/** A fresh registry whose series all carry `app="<app>"`. */
export function createMetricsRegistry(app: string, options: MetricsRegistryOptions = {}): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ app });
  if (options.processMetrics) collectDefaultMetrics({ register: registry });
  return registry;
}

/** Route label of requests that matched no route (404s): never the raw path. */
export const UNMATCHED_ROUTE = "unmatched";

/**
 * Marks the requests a sub-router handles with the router's mount path (a literal), so their route
 * label is `<mount><route pattern>`. Express restores `req.baseUrl` when a request leaves the
 * router (e.g. to reach the app's error handler), and `req.baseUrl` is the raw matched text, so
 * neither can be used for a label. Register it first on every router mounted with `use(path, …)`.
 */
export function routeBase(mountPath: string): RequestHandler {
  return (_req, res, next) => {
    res.locals.routeBase = mountPath;
    next();
  };
}

/**
 * The request's route pattern (`/api/v1/bots/:id/check`), never the raw path: bounded label
 * values however many bots and users there are. Requests no route matched get `unmatched`, or
 * `<mount>/*` inside a sub-router (e.g. a 401 from the router's key check).
 */
export function routeLabel(req: Request, res: Response): string {
  const pattern = (req.route as { path?: unknown } | undefined)?.path;
  const base = res.locals.routeBase as string | undefined;
  if (typeof pattern === "string") {
    if (base === undefined) return pattern;
    return pattern === "/" ? base : base + pattern;
  }
  return base === undefined ? UNMATCHED_ROUTE : `${base}/*`;
}

/** Latency buckets (seconds) of HTTP requests: 1 ms to 5 s. */
export const HTTP_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** The HTTP request series; `requestLog` feeds it once per finished request. */
export interface HttpMetrics {
  observe(route: string, method: string, status: number, seconds: number): void;
}

interface HttpChildren {
  count: { inc(): void };
  duration: { observe(value: number): void };
}

/**
 * `botdir_http_requests_total{route,method,status}` and
 * `botdir_http_request_duration_seconds{route,method,status}`. The labelled children are cached in
 * nested maps, so a request costs three map look-ups and two increments, without building a label
 * object (the hot path of the API is benchmarked).
 */
export function createHttpMetrics(registry: Registry): HttpMetrics {
  const labelNames = ["route", "method", "status"] as const;
  const requests = new Counter({
    name: "botdir_http_requests_total",
    help: "HTTP requests answered, by route pattern, method and status code.",
    labelNames,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "botdir_http_request_duration_seconds",
    help: "Time from the request reaching the app to the response being written, by route pattern, method and status code.",
    labelNames,
    buckets: HTTP_DURATION_BUCKETS,
    registers: [registry],
  });
  const cache = new Map<string, Map<string, Map<number, HttpChildren>>>();

  function children(route: string, method: string, status: number): HttpChildren {
    let byMethod = cache.get(route);
    if (!byMethod) {
      byMethod = new Map();
      cache.set(route, byMethod);
    }
    let byStatus = byMethod.get(method);
    if (!byStatus) {
      byStatus = new Map();
      byMethod.set(method, byStatus);
    }
    let found = byStatus.get(status);
    if (!found) {
      const labels = { route, method, status: String(status) };
      found = { count: requests.labels(labels), duration: duration.labels(labels) };
      byStatus.set(status, found);
    }
    return found;
  }

  return {
    observe(route, method, status, seconds) {
      const c = children(route, method, status);
      c.count.inc();
      c.duration.observe(seconds);
    },
  };
}

/** GET /metrics: the registry in the Prometheus text format. */
export function metricsHandler(registry: Registry): RequestHandler {
  return (_req, res, next) => {
    registry.metrics().then((text) => {
      res.setHeader("Content-Type", registry.contentType);
      res.setHeader("Cache-Control", "no-store");
      res.end(text);
    }, next);
  };
}

/** How long a scrape waits for PostgreSQL or Redis before it reports the source as down. */
export const SCRAPE_TIMEOUT_MS = 1_000;

/**
 * Runs a scrape-time read with a deadline; undefined when it failed or was too slow (the scrape
 * itself never fails or hangs because a store is down). The deadline is withLoopTimeout's: a reply
 * that came while our own loop was busy is read, not reported as a down store.
 */
export async function boundedRead<T>(
  read: () => Promise<T>,
  timeoutMs = SCRAPE_TIMEOUT_MS,
): Promise<T | undefined> {
  return withLoopTimeout(Promise.resolve().then(read), timeoutMs, timeoutMs * 1.5).catch(() => undefined);
}

export interface ScrapeSources {
  /**
   * Registers a scrape-time read (one PostgreSQL query, one Redis call). The returned function
   * shares one bounded read among everything that asks during a scrape (the registry collects its
   * metrics concurrently), so two gauges fed by one query run it once.
   */
  add<T>(source: string, read: () => Promise<T>): () => Promise<T | undefined>;
}

/**
 * The scrape-time sources of a registry and `botdir_metrics_source_up{source}`: 1 when the read
 * answered within the timeout, 0 otherwise (its gauges are then absent or NaN, never stale).
 */
export function createScrapeSources(registry: Registry, timeoutMs = SCRAPE_TIMEOUT_MS): ScrapeSources {
  const sources = new Map<string, () => Promise<unknown>>();
  new Gauge({
    name: "botdir_metrics_source_up",
    help: "1 when the scrape-time read of the source (outbox, queue) answered within the scrape timeout.",
    labelNames: ["source"],
    registers: [registry],
    async collect() {
      await Promise.all(
        [...sources].map(async ([source, get]) => {
          this.set({ source }, (await get()) === undefined ? 0 : 1);
        }),
      );
    },
  });
  return {
    add<T>(source: string, read: () => Promise<T>) {
      let inflight: Promise<T | undefined> | undefined;
      const get = (): Promise<T | undefined> => {
        inflight ??= boundedRead(read, timeoutMs).finally(() => {
          inflight = undefined;
        });
        return inflight;
      };
      sources.set(source, get);
      return get;
    },
  };
}

/** One series of a counter: what it counts goes up by one, or by `amount`. */
export interface CounterSeries {
  inc(amount?: number): void;
}

/**
 * A counter with one label, and its series for each of `values`, all present (at 0) from the start
 * so that rate() and ratios work at once.
 */
export function createCounterSeries<V extends string>(
  registry: Registry,
  values: readonly V[],
  counter: { name: string; help: string; label: string },
): Record<V, CounterSeries> {
  const { name, help, label } = counter;
  const labelled = new Counter({ name, help, labelNames: [label], registers: [registry] });
  return Object.fromEntries(
    values.map((value) => {
      const series = labelled.labels({ [label]: value });
      series.inc(0);
      return [value, series];
    }),
  ) as Record<V, CounterSeries>;
}

/**
 * `botdir_batch_statements_total{statement}` and `botdir_batch_requests_total{statement}`: the
 * statements createBatcher sent and the requests they answered (their ratio is the mean batch
 * size). One observer per statement name, each series present from the start.
 */
export function createBatchMetrics<S extends string>(
  registry: Registry,
  statements: readonly S[],
): Record<S, (size: number) => void> {
  const sent = createCounterSeries(registry, statements, {
    name: "botdir_batch_statements_total",
    help: "Batched hot-path statements sent (the requests of one event-loop turn coalesced into one).",
    label: "statement",
  });
  const answered = createCounterSeries(registry, statements, {
    name: "botdir_batch_requests_total",
    help: "Requests answered by batched statements; divided by botdir_batch_statements_total, the mean batch size.",
    label: "statement",
  });
  return Object.fromEntries(
    statements.map((statement) => {
      const observe = (size: number) => {
        sent[statement].inc();
        answered[statement].inc(size);
      };
      return [statement, observe];
    }),
  ) as Record<S, (size: number) => void>;
}
