/**
 * One start/stop shape for the three apps: `serve()` creates the HTTP listeners with explicit
 * timeouts and the JSON client-error answers, answers the probes (`/livez`, `/readyz`) in front
 * of the app, and owns the ready/draining state. `onShutdown` on the returned service turns
 * `/readyz` to 503 and stops accepting connections at once on SIGTERM/SIGINT, answers what arrives
 * on the open connections for the drain (each answer with `Connection: close`), then runs the app's
 * ordered steps within a deadline. What differs between the apps (their steps, their readiness
 * checks, their extra listeners) stays in each `main.ts`.
 */
import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerResponse,
} from "node:http";
import { type HealthChecks, type HealthReport, runHealthChecks } from "./health.js";
import {
  closeServer,
  describeError,
  jsonClientErrors,
  type Logger,
  listen,
  type ShutdownStep,
  stopAccepting,
  trackConnections,
} from "./http.js";
import { Gauge, type Registry } from "./metrics.js";

/** Timeouts every listener sets explicitly (docs/operations.md, "Server timeouts"). */
export interface HttpTimeouts {
  /** Idle time of a keep-alive connection; keep it longer than the load balancer's idle timeout. */
  keepAliveMs: number;
  /** Time for a request's headers to arrive; longer than keepAliveMs. */
  headersMs: number;
  /** Time for a whole request (headers and body) to arrive; at least headersMs. */
  requestMs: number;
}

export const DEFAULT_HTTP_TIMEOUTS: HttpTimeouts = {
  keepAliveMs: 65_000,
  headersMs: 66_000,
  requestMs: 90_000,
};

/** The rule between the three, as one sentence (null when it holds). */
export function httpTimeoutsProblem(t: HttpTimeouts): string | null {
  if (t.headersMs <= t.keepAliveMs)
    return "HTTP_HEADERS_TIMEOUT_MS must be longer than HTTP_KEEP_ALIVE_TIMEOUT_MS";
  if (t.requestMs < t.headersMs) return "HTTP_REQUEST_TIMEOUT_MS must be at least HTTP_HEADERS_TIMEOUT_MS";
  return null;
}

/**
 * A node:http server with the timeouts set, the JSON answers to unparseable requests, and the
 * expired-header check run often enough for `headersMs` to mean what it says (Node checks every
 * 30 s by default).
 */
export function createHttpServer(handler: RequestListener, timeouts: HttpTimeouts): Server {
  const server = createServer(
    { connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(timeouts.headersMs / 4))) },
    handler,
  );
  server.keepAliveTimeout = timeouts.keepAliveMs;
  server.headersTimeout = timeouts.headersMs;
  server.requestTimeout = timeouts.requestMs;
  jsonClientErrors(server);
  trackConnections(server);
  return server;
}

export type ServiceState = "starting" | "ready" | "draining";

export interface ServeOptions {
  logger: Logger;
  /** The app (an Express app is a request listener). */
  app: RequestListener;
  port: number;
  /** The variable `port` comes from, named when it cannot be bound (e.g. `API_PORT`). */
  portVariable: string;
  host?: string;
  timeouts: HttpTimeouts;
  /** What `/readyz` requires besides "not draining" (e.g. PostgreSQL; Redis only where needed). */
  readiness: HealthChecks;
  /** How long `/readyz` results are reused: the probe costs one query per interval, not per call. */
  readinessCacheMs?: number;
  /** More listeners started with the main one and closed with it (the API's metrics port). */
  extra?: { name: string; app: RequestListener; port: number; portVariable: string; host?: string }[];
  /**
   * The app's metrics registry: `botdir_ready` is added to it, 1 when `/readyz` would answer 200
   * (read at scrape time through the same cached checks), 0 while starting, draining or a readiness
   * check fails. `up` only says that the scrape answered; alerts need readiness itself.
   */
  metrics?: Registry;
}

/** A listener that could not be bound; the message is one line naming the variable and the port. */
export class ListenError extends Error {}

const LISTEN_PROBLEMS: Record<string, string> = {
  EADDRINUSE: "is already in use",
  EACCES: "is not allowed for this user (permission denied)",
  EADDRNOTAVAIL: "cannot be bound: the address is not available on this machine",
};

/** Binds `server`, or throws the ListenError naming `variable` and the port. */
async function bind(server: Server, port: number, variable: string, host?: string): Promise<void> {
  try {
    await listen(server, port, host);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? "";
    const problem = LISTEN_PROBLEMS[code] ?? `cannot be bound (${code || describeError(error)})`;
    throw new ListenError(`${variable} ${port}${host ? ` on ${host}` : ""} ${problem}.`);
  }
}

export interface Service {
  /** The main listener. */
  server: Server;
  state(): ServiceState;
  /** Closes every listener gracefully (in-flight requests finish, idle sockets close). */
  close(): Promise<void>;
  /**
   * On SIGTERM: `/readyz` answers 503 and the listeners stop accepting connections at once; for
   * `drainMs` every request on an already open connection is answered, with `Connection: close`,
   * and that connection closed after the answer (a keep-alive client opens its next one
   * elsewhere); then `steps` run in order within `deadlineMs` (the `http` step closes the
   * connections still idle, closeServer); exits 0 when all finished, 1 on a failed step or the
   * deadline. SIGINT (Ctrl-C) does the same without the drain.
   */
  onShutdown(steps: ShutdownStep[], options: { drainMs: number; deadlineMs?: number }): void;
}

const PROBE_HEADERS = { "Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store" };

function answer(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...PROBE_HEADERS, ...headers, "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

/** `/livez` and `/readyz` (with or without a query string), or null. */
function probeOf(url: string | undefined): "livez" | "readyz" | null {
  if (url === undefined || url.length < 6 || url.charCodeAt(1) === 97 /* a: /api... */) return null;
  const q = url.indexOf("?");
  const path = q === -1 ? url : url.slice(0, q);
  return path === "/livez" ? "livez" : path === "/readyz" ? "readyz" : null;
}

/** Starts the listeners; the service is ready (for `/readyz`) once they are bound. */
export async function serve(options: ServeOptions): Promise<Service> {
  let state: ServiceState = "starting";
  const cacheMs = options.readinessCacheMs ?? 1_000;
  let cached: { at: number; report: Promise<HealthReport> } | undefined;
  const readiness = (): Promise<HealthReport> => {
    const now = Date.now();
    if (!cached || now - cached.at >= cacheMs) {
      cached = { at: now, report: runHealthChecks(options.readiness) };
    }
    return cached.report;
  };

  const probe = async (kind: "livez" | "readyz", req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      answer(res, 405, { error: "Method not allowed." }, { Allow: "GET, HEAD" });
      return;
    }
    if (kind === "livez") return answer(res, 200, { status: "ok" });
    if (state !== "ready") {
      const error = state === "draining" ? "The service is shutting down." : "The service is starting.";
      return answer(res, 503, { status: "unavailable", checks: {}, error });
    }
    const report = await readiness();
    answer(res, report.ok ? 200 : 503, report.body);
  };

  if (options.metrics) {
    new Gauge({
      name: "botdir_ready",
      help: "1 when the process would answer /readyz with 200 (not starting or draining, its readiness checks pass), 0 otherwise.",
      registers: [options.metrics],
      async collect() {
        const report = state === "ready" ? await readiness().catch(() => undefined) : undefined;
        this.set(report?.ok ? 1 : 0);
      },
    });
  }

  const wrap = (app: RequestListener, withProbes: boolean): RequestListener => {
    return (req, res) => {
      if (withProbes) {
        const kind = probeOf(req.url);
        if (kind !== null) {
          probe(kind, req, res).catch(() => answer(res, 503, { status: "unavailable", checks: {} }));
          return;
        }
      }
      app(req, res);
    };
  };

  const server = createHttpServer(wrap(options.app, true), options.timeouts);
  const extra = (options.extra ?? []).map((l) => ({
    ...l,
    server: createHttpServer(wrap(l.app, false), options.timeouts),
  }));
  const close = async () => {
    await Promise.all([closeServer(server), ...extra.map((l) => closeServer(l.server))]);
  };
  try {
    await bind(server, options.port, options.portVariable, options.host);
    for (const l of extra) await bind(l.server, l.port, l.portVariable, l.host);
  } catch (error) {
    // The listeners already bound are released, so a caller that goes on leaves no port held.
    await Promise.all(
      [server, ...extra.map((l) => l.server)].filter((s) => s.listening).map((s) => closeServer(s)),
    );
    throw error;
  }
  state = "ready";

  return {
    server,
    state: () => state,
    close,
    onShutdown(steps, { drainMs, deadlineMs = 15_000 }) {
      const { logger } = options;
      let stopping = false;
      const stop = async (signal: string) => {
        if (stopping) return;
        stopping = true;
        state = "draining";
        // Ctrl-C in a terminal (SIGINT) has no load balancer to wait for: no drain.
        const drain = signal === "SIGTERM" ? drainMs : 0;
        await Promise.all([server, ...extra.map((l) => l.server)].map((s) => stopAccepting(s)));
        logger.info({ signal, drainMs: drain }, "shutting down: not ready, not accepting, draining");
        if (drain > 0) await new Promise((resolve) => setTimeout(resolve, drain));
        const timer = setTimeout(() => {
          logger.error({ deadlineMs }, "shutdown deadline passed; exiting");
          process.exit(1);
        }, deadlineMs);
        timer.unref();
        let code = 0;
        for (const step of steps) {
          try {
            await step.run();
          } catch (error) {
            code = 1;
            logger.error({ step: step.name, err: describeError(error) }, "shutdown step failed");
          }
        }
        logger.info({}, "stopped");
        process.exit(code);
      };
      process.once("SIGTERM", () => void stop("SIGTERM"));
      process.once("SIGINT", () => void stop("SIGINT"));
    },
  };
}

/**
 * serve() for main.ts: a listener that cannot be bound prints its one line to stderr (e.g.
 * `METRICS_PORT 9464 is already in use.`) and exits 1, like a bad variable, with no stack trace.
 */
export async function serveOrExit(options: ServeOptions): Promise<Service> {
  try {
    return await serve(options);
  } catch (error) {
    if (!(error instanceof ListenError)) throw error;
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
}
