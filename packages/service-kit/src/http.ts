/**
 * Express plumbing shared by the three apps: the one error middleware, the JSON 404/405, body
 * parsing errors, request ids, one log line per request, and graceful shutdown. Express is only
 * referenced by type here; each app passes its own `express` in.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { Server as NetServer, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { ApiError, CONFLICT_HEADER, MESSAGES } from "@botdir/schema";
import {
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from "@opentelemetry/api";
import type { ErrorRequestHandler, NextFunction, Request, RequestHandler, Response } from "express";
import { type HttpMetrics, routeLabel } from "./metrics.js";
import {
  idsLogFields,
  mergeTraceFields,
  NO_TRACE_FIELDS,
  spanLogFields,
  startSpan,
  traceLogFields,
  traceparentOf,
  tracesExported,
  unrecordedServerIds,
  unsampledTraceId,
} from "./telemetry.js";

/** The subset of pino the apps use; tests can pass a capturing fake. */
export interface Logger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** pino's level check; a logger without it logs every level. */
  isLevelEnabled?(level: string): boolean;
}

/** `logger` with `fields` on every line (a line's own fields of the same names win). */
export function loggerWith(logger: Logger, fields: Record<string, unknown>): Logger {
  return {
    info: (obj, msg) => logger.info({ ...fields, ...obj }, msg),
    warn: (obj, msg) => logger.warn({ ...fields, ...obj }, msg),
    error: (obj, msg) => logger.error({ ...fields, ...obj }, msg),
    ...(logger.isLevelEnabled ? { isLevelEnabled: logger.isLevelEnabled.bind(logger) } : {}),
  };
}

/** Assigns a request id (kept from `X-Request-Id` when it is sane) to `res.locals.reqId`. */
export function requestId(): RequestHandler {
  return (req, res, next) => {
    assignRequestId(req, res);
    next();
  };
}

function assignRequestId(req: Request, res: Response): void {
  res.locals.reqId = setRequestId(req, res);
}

/** Kept from `X-Request-Id` when it is sane, else a new UUID; sent back in the same header. */
function setRequestId(req: IncomingMessage, res: ServerResponse): string {
  const incoming = req.headers["x-request-id"];
  const id = typeof incoming === "string" && /^[\w.-]{1,64}$/.test(incoming) ? incoming : randomUUID();
  res.setHeader("X-Request-Id", id);
  return id;
}

/**
 * One log line per request: request id, method, route pattern, path (without the query string),
 * status, duration. Never headers, query strings or bodies. With `metrics`, the same measurement
 * feeds the HTTP request series (one `finish` listener and one clock read for both).
 */
export function requestLog(logger: Logger, metrics?: HttpMetrics): RequestHandler {
  const finished = onFinished(logger, metrics);
  return (req, res, next) => {
    finished(req, res, process.hrtime.bigint());
    next();
  };
}

/**
 * What a request's `traceparent` does. `continue` (default; internal callers such as the site): the
 * request's server span continues it. `link` (the public edge): the request starts a new trace and
 * keeps the caller's span only as a link of its server span where spans are exported; its ids are
 * never used otherwise (not in the request's line, not in the work it starts), so a caller cannot
 * choose the trace id an owner quotes to support, nor file lines under another's.
 */
export interface TraceEdgeOptions {
  callerTrace?: "continue" | "link";
}

/** Requests taken at the public edge (`callerTrace: "link"`). */
const publicEdgeRequests = new WeakSet<IncomingMessage>();

/** The `traceparent` a request continues: its caller's, except at the public edge. */
function continuedTraceparent(req: IncomingMessage): string | string[] | undefined {
  return publicEdgeRequests.has(req) ? undefined : req.headers.traceparent;
}

/**
 * requestId and requestLog as one middleware (the hot paths pay for one Express layer, not two),
 * and the request's server span: it continues an incoming W3C `traceparent` and is named by the
 * route template when the answer is sent (`GET /api/v1/bots/:id/check`), as the metrics' route
 * label. Where spans are exported it is active for everything the request runs. Where nothing is
 * exported no context is entered (as the dispatcher enters none per job, where one cost ≈ 4 % of
 * its CPU, docs/performance.md) and the span (ids only) is made when something reads it: a route
 * that reads the request's trace (requestTrace, requestTraceparent) or a 5xx line, as two ids with
 * no span or context object. The request's line (LOG_LEVEL info) carries them when they were made
 * or the request came with a `traceparent` (unexportedLineFields).
 */
export function requestContext(
  logger: Logger,
  metrics?: HttpMetrics,
  options: TraceEdgeOptions = {},
): RequestHandler {
  const finished = onFinished(logger, metrics);
  const linkOnly = options.callerTrace === "link";
  return (req, res, next) => {
    const start = process.hrtime.bigint();
    if (linkOnly) publicEdgeRequests.add(req);
    assignRequestId(req, res);
    // A request the sampler does not record runs as with tracing off (its trace id decided here).
    const unsampled = tracesExported() ? unsampledTraceId(continuedTraceparent(req)) : undefined;
    if (tracesExported() && unsampled === undefined) {
      const [span, ctx] = startServerSpan(req);
      res.locals.trace = ctx;
      finished(req, res, start, span);
      context.with(ctx, next);
    } else {
      res.locals.trace = null; // its ids are made on first read (requestIds)
      res.locals.unsampledTrace = unsampled;
      finished(req, res, start);
      next();
    }
  };
}

/**
 * Where nothing is exported (requestContext kept no context): the ids of the request's server
 * span, made on first read and the same for every later one (unrecordedServerIds).
 */
function requestIds(res: Response): SpanContext | undefined {
  const kept = res.locals.traceIds as SpanContext | undefined;
  if (kept) return kept;
  const ids = unrecordedServerIds(
    continuedTraceparent(res.req),
    res.locals.unsampledTrace as string | undefined,
  );
  res.locals.traceIds = ids;
  return ids;
}

/**
 * The request's context (its server span): as requestContext keeps it where spans are exported;
 * else a context of the span's ids (requestIds); undefined for a request requestContext did not see.
 */
export function requestTrace(res: Response): Context | undefined {
  const kept = res.locals.trace as Context | null | undefined;
  if (kept !== null) return kept;
  const ids = requestIds(res);
  return ids ? trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(ids)) : undefined;
}

/** The ids of the request's server span (requestTrace), else of the active span. */
function requestSpanContext(res: Response): SpanContext | undefined {
  const kept = res.locals.trace as Context | null | undefined;
  if (kept === null) return requestIds(res);
  return trace.getSpan(kept ?? context.active())?.spanContext();
}

/** The `traceparent` of the request's server span (requestTrace), else of the active span, else null. */
export function requestTraceparent(res: Response): string | null {
  return traceparentOf(requestSpanContext(res));
}

/**
 * The `traceparent` a request's work keeps for later (a vote's delivery row): its server span's
 * where spans are exported or the caller sent a `traceparent` (the work continues that trace); null
 * where nothing is exported and the caller sent none, and no ids are made: such work's trace is the
 * one its own id names (a delivery's: deliveryTraceparent of @botdir/db), which costs nothing per
 * request (docs/performance.md "What tracing costs").
 */
export function requestKeptTraceparent(res: Response): string | null {
  if (res.locals.trace === null && continuedTraceparent(res.req) === undefined) return null;
  return requestTraceparent(res);
}

/** The server span of a request, continuing its `traceparent` header when it has a valid one. */
function startServerSpan(req: IncomingMessage): [Span, Context] {
  const given =
    req.headers.traceparent === undefined ? undefined : propagation.extract(ROOT_CONTEXT, req.headers);
  const linked = publicEdgeRequests.has(req) ? given && trace.getSpanContext(given) : undefined;
  const parent = given === undefined || publicEdgeRequests.has(req) ? ROOT_CONTEXT : given;
  const span = startSpan(
    req.method ?? "GET",
    {
      kind: SpanKind.SERVER,
      attributes: { "http.request.method": req.method ?? "GET" },
      ...(linked ? { links: [{ context: linked }] } : {}),
    },
    parent,
  );
  return [span, trace.setSpan(parent, span)];
}

/** Names the server span by its route, records the status and ends it. */
function endServerSpan(span: Span, method: string, route: string, status: number): void {
  span.updateName(`${method} ${route}`);
  span.setAttribute("http.route", route);
  span.setAttribute("http.response.status_code", status);
  if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}

/**
 * For a request answered before Express sees it (the API's early refusals): the same request id,
 * log line and metrics as requestContext, with the route pattern given by the caller (there is no
 * `req.route` nor `res.locals`). `start` (process.hrtime.bigint() when the request arrived, default
 * now) is for a request decided after a wait.
 */
export function earlyRequestContext(
  logger: Logger,
  metrics?: HttpMetrics,
  options: TraceEdgeOptions = {},
): (req: IncomingMessage, res: ServerResponse, route: string, start?: bigint) => void {
  const report = reporter(logger, metrics);
  const linkOnly = options.callerTrace === "link";
  return (req, res, route, start = process.hrtime.bigint()) => {
    if (linkOnly) publicEdgeRequests.add(req);
    const reqId = setRequestId(req, res);
    // As requestContext: where nothing is recorded no span is made (the line's ids when needed).
    const unsampled = tracesExported() ? unsampledTraceId(continuedTraceparent(req)) : undefined;
    const span = tracesExported() && unsampled === undefined ? startServerSpan(req)[0] : undefined;
    res.on("finish", () => {
      if (span) endServerSpan(span, req.method ?? "GET", route, res.statusCode);
      const fields = span ? () => spanLogFields(span) : () => givenTraceLineFields(req, unsampled);
      report(req.method ?? "GET", req.url ?? "/", route, res.statusCode, reqId, start, fields);
    });
  };
}

/**
 * The trace fields of a request's line where nothing is exported: the ids of its server span when
 * the request's trace is kept or known elsewhere (a route read it: a vote's delivery row, a
 * redelivery, a test event; or the caller sent a `traceparent`, whose trace the line continues);
 * none for a request whose trace exists nowhere else (a `/check`): no ids made, no bytes written.
 */
function unexportedLineFields(req: IncomingMessage, res: Response): Readonly<Record<string, string>> {
  const made = res.locals.traceIds as SpanContext | undefined;
  return made
    ? idsLogFields(made)
    : givenTraceLineFields(req, res.locals.unsampledTrace as string | undefined);
}

/**
 * Where nothing is exported and nothing read the request's trace (an early refusal's line too):
 * ids continuing the `traceparent` the caller sent, none when it sent none.
 */
function givenTraceLineFields(req: IncomingMessage, unsampled?: string): Readonly<Record<string, string>> {
  const traceparent = continuedTraceparent(req);
  return traceparent === undefined
    ? NO_TRACE_FIELDS
    : idsLogFields(unrecordedServerIds(traceparent, unsampled));
}

/** The log line and the metrics of one finished request; never throws. */
function reporter(logger: Logger, metrics?: HttpMetrics) {
  return (
    method: string,
    url: string,
    route: string,
    status: number,
    reqId: unknown,
    start: bigint,
    traceFields: () => Readonly<Record<string, string>>,
  ) => {
    try {
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      metrics?.observe(route, method, status, seconds);
      // pino's disabled levels are no-ops; skip building the line too (LOG_LEVEL=warn).
      if (logger.isLevelEnabled?.("info") === false) return;
      const q = url.indexOf("?");
      // The request's log line joins its trace (trace_id, span_id: its server span's).
      logger.info(
        {
          ...traceFields(),
          reqId,
          method,
          route,
          path: q === -1 ? url : url.slice(0, q),
          status,
          ms: Math.round(seconds * 10_000) / 10,
        },
        "request",
      );
    } catch {
      // Metrics and the log line are best-effort: a failure here must not be thrown into Node's
      // HTTP machinery (a throwing `finish` listener is an uncaught exception).
    }
  };
}

function onFinished(logger: Logger, metrics?: HttpMetrics) {
  const report = reporter(logger, metrics);
  return (req: Request, res: Response, start: bigint, span?: Span) => {
    res.on("finish", () => {
      let route: string;
      try {
        route = routeLabel(req, res);
      } catch {
        span?.end();
        return;
      }
      if (span) endServerSpan(span, req.method, route, res.statusCode);
      const fields = span
        ? () => spanLogFields(span)
        : res.locals.trace === undefined
          ? () => NO_TRACE_FIELDS
          : () => unexportedLineFields(req, res);
      report(req.method, req.originalUrl, route, res.statusCode, res.locals.reqId, start, fields);
    });
  };
}

/** Requires a JSON content type on requests that carry a body. */
export function requireJson(): RequestHandler {
  return (req, _res, next) => {
    const length = req.get("content-length");
    const hasBody = req.get("transfer-encoding") !== undefined || (length !== undefined && length !== "0");
    if (!hasBody && req.method !== "POST" && req.method !== "PUT" && req.method !== "PATCH") return next();
    if (!req.is("application/json") && !req.is("application/*+json")) {
      if (!hasBody) return next(new ApiError("bad_request", MESSAGES.invalidJson));
      return next(new ApiError("bad_request", MESSAGES.unsupportedMediaType));
    }
    next();
  };
}

/** JSON 404 for unknown routes. */
export function notFound(): RequestHandler {
  return (_req, _res, next) => next(new ApiError("not_found", MESSAGES.routeNotFound));
}

/** JSON 405 for a known path with another method; `allow` is sent in the Allow header. */
export function methodNotAllowed(allow: string[]): RequestHandler {
  return (_req, res, next) => {
    res.setHeader("Allow", allow.join(", "));
    next(new ApiError("method_not_allowed", MESSAGES.methodNotAllowed));
  };
}

interface BodyParserError {
  type?: string;
  status?: number;
  statusCode?: number;
}

/**
 * Retry-After (seconds) of every 5xx answer: the spec's 500 says "retry with backoff", and the
 * usual cause is a dependency outage (PostgreSQL), which a client hammering at once only prolongs.
 */
export const SERVER_ERROR_RETRY_AFTER_SECONDS = 5;

/**
 * Maps anything thrown to the spec's error body. The only error middleware of each app. A 429
 * carries its window's Retry-After, a 5xx SERVER_ERROR_RETRY_AFTER_SECONDS.
 */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (err: unknown, req: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) return next(err);
    const apiError = toApiError(err);
    if (apiError.status >= 500) {
      logger.error(
        {
          ...idsLogFields(requestSpanContext(res)),
          reqId: res.locals.reqId,
          method: req.method,
          path: req.path,
          err: describeError(err),
        },
        "request failed",
      );
    }
    sendApiError(res, apiError);
  };
}

/**
 * The answer of an ApiError (status, Retry-After, the spec's body), written directly: a handler
 * that refuses a request (401/404/429) can answer without Express walking the remaining layers to
 * reach the error middleware. Same bytes as the error middleware.
 */
export function sendApiError(res: ServerResponse, apiError: ApiError): void {
  if (apiError.code === "rate_limited" && typeof apiError.extra.retryAfter === "number") {
    res.setHeader("Retry-After", String(apiError.extra.retryAfter));
  } else if (apiError.status >= 500) {
    res.setHeader("Retry-After", String(SERVER_ERROR_RETRY_AFTER_SECONDS));
  } else if (apiError.status === 409) {
    res.setHeader(CONFLICT_HEADER, apiError.conflict ?? "conflict");
  }
  sendJson(res, apiError.body(), apiError.status);
}

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const parserError = err as BodyParserError | null;
  switch (parserError?.type) {
    case "entity.parse.failed":
      return new ApiError("bad_request", MESSAGES.invalidJson);
    case "entity.too.large":
      return new ApiError("payload_too_large", MESSAGES.bodyTooLarge);
    case "encoding.unsupported":
    case "charset.unsupported":
      return new ApiError("bad_request", "The body must be UTF-8 encoded JSON.");
    case "request.aborted":
    case "request.size.invalid":
    case "stream.encoding.set":
      return new ApiError("bad_request", "The request body could not be read.");
  }
  const status = parserError?.status ?? parserError?.statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return new ApiError("bad_request", "The request could not be read.");
  }
  return new ApiError("internal", MESSAGES.internal);
}

/** Error name, message and code only: never request data, headers or secrets. */
export function describeError(err: unknown): { name?: string; message?: string; code?: unknown } {
  if (err instanceof Error) {
    return { name: err.name, message: scrubSecrets(err.message), code: (err as { code?: unknown }).code };
  }
  return { message: scrubSecrets(String(err)) };
}

/**
 * Defense in depth for error messages, which no redact path can reach: hides the password of a
 * connection URL (`postgresql://user:pw@host`) and the value of a Bearer credential.
 */
export function scrubSecrets(text: string): string {
  return text
    .replace(/(\/\/[^\s/:@]*):[^\s/@]*@/g, "$1:[redacted]@")
    .replace(/\b(Bearer|Basic)\s+[\w.~+/=-]+/gi, "$1 [redacted]");
}

/**
 * What every app's logger censors: no code path logs these, and if one ever did, the line would
 * carry "[redacted]" instead. Error messages are scrubbed by describeError. Censored: the keys below
 * at the top level and one level down under any key (`x` and `*.x`), and `authorization` and
 * `cookie` under `headers` and `req.headers`; `src/logger.test.ts` lists every such path and checks
 * it. Applied by redactSecrets (pino's `formatters.log`).
 */
export const LOG_CENSOR = "[redacted]";
/** Keys censored at the top level and one level down (`x` and `*.x`). */
const SECRET_KEYS: ReadonlySet<string> = new Set([
  "authorization",
  "token",
  "secret",
  "webhookSecret",
  "webhook_secret",
  "internalApiKey",
  "password",
  "body",
]);
/** Keys censored under a `headers` object (top level or `req.headers`). */
const HEADER_KEYS: ReadonlySet<string> = new Set(["authorization", "cookie"]);

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v) && !ArrayBuffer.isView(v);

/** A shallow copy of `obj` with `keys` censored, or `obj` itself when it has none of them. */
function censorKeys(obj: Record<string, unknown>, keys: ReadonlySet<string>): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  for (const key in obj) {
    if (!keys.has(key) || !Object.hasOwn(obj, key)) continue;
    out ??= { ...obj };
    out[key] = LOG_CENSOR;
  }
  return out ?? obj;
}

/**
 * The log record with every secret path censored (see LOG_CENSOR); the caller's objects are never
 * changed (censored levels are copied). One pass over the record's keys (and those of the objects
 * it holds), instead of one lookup per configured path: pino's `redact` with these 21 paths, most
 * of them wildcards, was 8 % of the API's CPU on its cheapest path (docs/performance.md).
 */
export function redactSecrets(record: Record<string, unknown>): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  const set = (key: string, value: unknown) => {
    out ??= { ...record };
    out[key] = value;
  };
  for (const key in record) {
    if (!Object.hasOwn(record, key)) continue;
    if (SECRET_KEYS.has(key)) {
      set(key, LOG_CENSOR);
      continue;
    }
    const value = record[key];
    if (!isObject(value)) continue;
    let inner = censorKeys(value, SECRET_KEYS);
    // headers.cookie (headers.authorization is *.authorization); req.headers.authorization/cookie.
    if (key === "headers") inner = censorKeys(inner, HEADER_KEYS);
    else if (key === "req" && isObject(inner.headers)) {
      const censored = censorKeys(inner.headers, HEADER_KEYS);
      if (censored !== inner.headers) inner = { ...inner, headers: censored };
    }
    if (inner !== value) set(key, inner);
  }
  return out ?? record;
}

/** The options of every app's pino logger: JSON lines with `name`, `level` and redaction. */
export interface LogOutput {
  /** The app's NODE_ENV (from its env.ts); default: the process's. */
  nodeEnv?: string | undefined;
  /** Whether stdout is a terminal; default: process.stdout.isTTY. */
  tty?: boolean | undefined;
}

/**
 * pino options of an app: JSON lines (one per request, secrets redacted), or, outside production
 * when stdout is a terminal, the same records made readable by pino-pretty (a dev dependency;
 * bundled next to dist/main.js by scripts/build-app.mjs, so `node dist/main.js` prints them too).
 */
export function loggerOptions(name: string, level: string, output: LogOutput = {}) {
  // mixin: `trace_id` and `span_id` on every line written inside a span (docs/tracing.md).
  const options = {
    name,
    level,
    mixin: traceLogFields,
    mixinMergeStrategy: mergeTraceFields,
    formatters: { log: redactSecrets },
  };
  const nodeEnv = output.nodeEnv ?? process.env.NODE_ENV;
  const tty = output.tty ?? process.stdout.isTTY === true;
  if (nodeEnv === "production" || !tty || !prettyAvailable()) return options;
  return {
    ...options,
    transport: {
      target: "pino-pretty",
      options: { translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname" },
    },
  };
}

/** pino-pretty is bundled (pino's bundler hook names it) or installed (a development checkout). */
function prettyAvailable(): boolean {
  const bundled = (globalThis as { __bundlerPathsOverrides?: Record<string, string> })
    .__bundlerPathsOverrides;
  if (bundled?.["pino-pretty"]) return true;
  try {
    createRequire(import.meta.url).resolve("pino-pretty");
    return true;
  } catch {
    return false;
  }
}

/** One step of an app's ordered shutdown (serve().onShutdown). */
export interface ShutdownStep {
  name: string;
  run(): Promise<unknown>;
}

/** How long a connection that carries no request may stay open once its server is closing. */
export const CLOSE_IDLE_GRACE_MS = 1_000;

interface ConnectionState {
  inFlight: number;
  lastActive: number;
}

const netServerClose = NetServer.prototype.close;

/** Connection activity of the servers made by trackConnections (createHttpServer does it). */
const tracked = new WeakMap<Server, Map<Socket, ConnectionState>>();

/**
 * Records, per connection, the requests in flight and when it last did anything, so closeServer
 * can tell a connection a client may be sending on from one that has gone quiet.
 */
export function trackConnections(server: Server): void {
  const connections = new Map<Socket, ConnectionState>();
  tracked.set(server, connections);
  server.on("connection", (socket: Socket) => {
    connections.set(socket, { inFlight: 0, lastActive: Date.now() });
    socket.once("close", () => connections.delete(socket));
  });
  server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => {
    const state = connections.get(req.socket);
    if (!state) return;
    state.inFlight++;
    state.lastActive = Date.now();
    res.once("close", () => {
      state.inFlight--;
      state.lastActive = Date.now();
    });
  });
}

/** Servers that stopped accepting: when the listener closed, and when the last connection did. */
const stopped = new WeakMap<Server, { listenerClosed: Promise<void>; drained: Promise<void> }>();

/**
 * Stops accepting connections, from the check phase right after the event loop's poll phase (the
 * listener's backlog was just accepted then, so the close resets as few handshakes as can be), and
 * keeps every open connection: from now on each answer carries `Connection: close` and its
 * connection is closed once the answer is written, so the client opens its next connection
 * elsewhere (and finds this port refused, not reset). Resolves once the listener is closed;
 * `closeServer` then closes what stays idle.
 */
export function stopAccepting(server: Server): Promise<void> {
  let state = stopped.get(server);
  if (!state) {
    server.prependListener("request", (_req: IncomingMessage, res: ServerResponse) => {
      if (!res.headersSent) res.setHeader("Connection", "close");
    });
    let drained: Promise<void> = Promise.resolve();
    const listenerClosed = new Promise<void>((resolve) => {
      setImmediate(() => {
        // net.Server's close: stop listening and call back once every connection has closed,
        // without http.Server's immediate drop of idle connections.
        drained = new Promise<void>((done, fail) =>
          netServerClose.call(server, (error?: Error) => (error ? fail(error) : done())),
        );
        resolve();
      });
    });
    state = { listenerClosed, drained: listenerClosed.then(() => drained) };
    // Awaited by closeServer; a shutdown that exits before it must not end on an unhandled rejection.
    state.drained.catch(() => {});
    stopped.set(server, state);
  }
  return state.listenerClosed;
}

/**
 * Closes an HTTP server: stops accepting (stopAccepting, when not done yet), lets in-flight
 * requests finish, then closes each keep-alive connection once it has carried no request for
 * `idleGraceMs`. Node's own close() drops idle connections at once, and a client whose request is
 * already on its way on one (a connection just opened, or reused a moment ago) then sees a reset
 * for a request it sent; here a request that arrives during the grace is answered, with
 * `Connection: close`, and its connection closed after the answer.
 */
export async function closeServer(server: Server, idleGraceMs = CLOSE_IDLE_GRACE_MS): Promise<void> {
  const connections = tracked.get(server);
  if (!connections) {
    // A server without tracking: Node's close(), which drops idle connections now and as they
    // go idle (they would otherwise hold it open until the client's keep-alive timeout).
    const sweep = setInterval(() => server.closeIdleConnections(), 100);
    try {
      await new Promise<void>((resolve, reject) =>
        server.close((error) => (error ? reject(error) : resolve())),
      );
    } finally {
      clearInterval(sweep);
    }
    return;
  }
  await stopAccepting(server);
  const closeQuiet = () => {
    const now = Date.now();
    for (const [socket, state] of connections) {
      if (state.inFlight === 0 && now - state.lastActive >= idleGraceMs) socket.destroy();
    }
  };
  const sweep = setInterval(closeQuiet, Math.max(10, Math.min(100, idleGraceMs / 4)));
  closeQuiet();
  try {
    await stopped.get(server)?.drained;
  } finally {
    clearInterval(sweep);
  }
}

/**
 * Requests Node cannot even parse as HTTP (garbage, a body with no length, oversized headers) get
 * the JSON error body too, instead of Node's plain-text 400, and the connection is closed.
 */
export function jsonClientErrors(server: Server): void {
  server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => {
    if (error.code === "ECONNRESET" || !socket.writable) {
      socket.destroy();
      return;
    }
    const tooLarge = error.code === "HPE_HEADER_OVERFLOW";
    const timeout = error.code === "ERR_HTTP_REQUEST_TIMEOUT";
    const [status, reason, sentence] = tooLarge
      ? [431, "Request Header Fields Too Large", "The request headers are too large."]
      : timeout
        ? [408, "Request Timeout", "The request took too long to arrive."]
        : [400, "Bad Request", "The request is not valid HTTP."];
    const body = JSON.stringify({ error: sentence });
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}

/** Starts listening and resolves once the port is bound. */
export function listen(server: Server, port: number, host?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/**
 * A JSON answer written straight to Node's response, without Express's `res.json`/`res.send`
 * (which re-parse and re-format the Content-Type header and consider ETags on every call: a
 * measurable share of the hot paths). Same bytes and headers as `res.status(status).json(body)`;
 * Node leaves the body out of an answer to HEAD.
 */
export function sendJson(res: ServerResponse, body: unknown, status = 200): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", Buffer.byteLength(text));
  res.end(text);
}
