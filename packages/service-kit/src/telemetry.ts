/**
 * Tracing of the three apps (docs/tracing.md): the OpenTelemetry trace SDK configured from the
 * standard OTEL_* variables, and the few helpers the apps start their spans with.
 *
 * Spans are started at our own seams (the request-context middleware, the vote path, the queue
 * hand-offs, the dispatcher's claim / POST / record), not by instrumentation libraries: those patch
 * modules as Node loads them (require-in-the-middle / import-in-the-middle), and the production
 * bundles (scripts/build-app.mjs) load Express, pg, ioredis and BullMQ from inside one file, where
 * nothing can patch them. Our seams also name spans by what they do for a vote, and carry the
 * delivery and bot ids the operator searches by.
 *
 * A provider is always registered, even with no endpoint (or OTEL_SDK_DISABLED): its sampler then
 * drops every span (nothing recorded, nothing exported), but each span still has a trace id and a
 * span id. Every vote therefore has a trace id owners can quote (X-Webhook-Trace) and every log
 * line written inside a span carries it. Such spans are ids and nothing else, so our seams make
 * them without the SDK (inSpan, startSpan), make none below them, and enter no context per request
 * or job (requestContext keeps the request's for the routes that read it, inContext): what tracing
 * off costs is kept to the ids (docs/performance.md, "What tracing costs").
 */
import {
  type Attributes,
  type Context,
  type ContextManager,
  context,
  isSpanContextValid,
  type Link,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  type SpanOptions,
  SpanStatusCode,
  TraceFlags,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { z } from "zod";
import { newSpanId, newTraceId, OtlpSpanExporter, RecordedSpan, ratioSampler } from "./spans.js";

export type { Link };
export { SpanKind };

const SAMPLERS = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
] as const;

const PROTOCOLS = ["http/protobuf", "http/json"] as const;

/** `key=value,key=value` (W3C baggage-like, values percent-decoded), as OTEL_RESOURCE_ATTRIBUTES. */
export function parseKeyValues(text: string): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const part of text.split(",")) {
    if (part.trim() === "") continue;
    const eq = part.indexOf("=");
    if (eq <= 0) return null;
    const key = part.slice(0, eq).trim();
    let value: string;
    try {
      value = decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      return null;
    }
    if (key === "") return null;
    out[key] = value;
  }
  return out;
}

const keyValues = (what: string) =>
  z
    .string()
    .refine((v) => parseKeyValues(v) !== null, `must be ${what} as key=value pairs separated by commas`);

const PROTOCOL_ERROR =
  "must be http/protobuf or http/json (grpc is not supported: use the collector's OTLP/HTTP port, 4318)";
const endpointUrl = () =>
  z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).optional();
const compression = () => z.enum(["gzip", "none"], { error: "must be gzip or none" });
const timeoutMs = () =>
  z.coerce
    .number({ error: "must be a number of milliseconds" })
    .int("must be a whole number of milliseconds")
    .min(1, "must be at least 1 millisecond")
    .max(600_000, "must be at most 600000 milliseconds")
    .optional();

/**
 * The standard OpenTelemetry variables every app's env schema reads (service name: per app). Each
 * OTEL_EXPORTER_OTLP_TRACES_* variable, where set, wins over its general OTEL_EXPORTER_OTLP_* one
 * (the OpenTelemetry specification's precedence; exportTarget).
 */
export const TelemetryEnvFields = {
  /** OTLP/HTTP base URL (`/v1/traces` is appended); unset (and no traces endpoint): nothing is exported. */
  OTEL_EXPORTER_OTLP_ENDPOINT: endpointUrl(),
  /** The traces endpoint, used as it is (nothing appended). */
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpointUrl(),
  /**
   * The OTLP transport: `http/protobuf` (the specification's default) or `http/json`. gRPC is not
   * supported (no gRPC client in the bundles): refused at start.
   */
  OTEL_EXPORTER_OTLP_PROTOCOL: z.enum(PROTOCOLS, { error: PROTOCOL_ERROR }).default("http/protobuf"),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: z.enum(PROTOCOLS, { error: PROTOCOL_ERROR }).optional(),
  /** `gzip` compresses each export's body; `none` (the specification's default) sends it as it is. */
  OTEL_EXPORTER_OTLP_COMPRESSION: compression().default("none"),
  OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: compression().optional(),
  /** Headers of every export request, e.g. `x-honeycomb-team=KEY` (never logged). */
  OTEL_EXPORTER_OTLP_HEADERS: keyValues("headers").optional(),
  OTEL_EXPORTER_OTLP_TRACES_HEADERS: keyValues("headers").optional(),
  /** One export request's deadline in milliseconds (default 10000). */
  OTEL_EXPORTER_OTLP_TIMEOUT: timeoutMs(),
  OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: timeoutMs(),
  /** Milliseconds between two exports of the buffered spans (default 1000; sooner past 512 KiB). */
  OTEL_BSP_SCHEDULE_DELAY: timeoutMs(),
  OTEL_TRACES_SAMPLER: z
    .enum(SAMPLERS, { error: `must be one of ${SAMPLERS.join(", ")}` })
    .default("parentbased_always_on"),
  /** The ratio of the *traceidratio samplers, 0 to 1. */
  OTEL_TRACES_SAMPLER_ARG: z.coerce.number().min(0).max(1).default(1),
  OTEL_SDK_DISABLED: z
    .enum(["true", "false", "1", "0", "yes", "no", ""])
    .default("false")
    .transform((v) => v === "true" || v === "1" || v === "yes"),
  OTEL_RESOURCE_ATTRIBUTES: keyValues("resource attributes").optional(),
} as const;

/** The fields of an app's env schema: TelemetryEnvFields and OTEL_SERVICE_NAME defaulting to `serviceName`. */
export function telemetryEnvFields(serviceName: string) {
  return { ...TelemetryEnvFields, OTEL_SERVICE_NAME: z.string().min(1).max(200).default(serviceName) };
}

export interface TelemetryEnv {
  OTEL_EXPORTER_OTLP_ENDPOINT?: string | undefined;
  /** Default http/protobuf (as the schema's). */
  OTEL_EXPORTER_OTLP_PROTOCOL?: (typeof PROTOCOLS)[number] | undefined;
  /** Default none (as the schema's). */
  OTEL_EXPORTER_OTLP_COMPRESSION?: "gzip" | "none" | undefined;
  OTEL_EXPORTER_OTLP_HEADERS?: string | undefined;
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?: string | undefined;
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?: (typeof PROTOCOLS)[number] | undefined;
  OTEL_EXPORTER_OTLP_TRACES_COMPRESSION?: "gzip" | "none" | undefined;
  OTEL_EXPORTER_OTLP_TRACES_HEADERS?: string | undefined;
  OTEL_EXPORTER_OTLP_TIMEOUT?: number | undefined;
  OTEL_EXPORTER_OTLP_TRACES_TIMEOUT?: number | undefined;
  OTEL_BSP_SCHEDULE_DELAY?: number | undefined;
  OTEL_TRACES_SAMPLER: (typeof SAMPLERS)[number];
  OTEL_TRACES_SAMPLER_ARG: number;
  OTEL_SDK_DISABLED: boolean;
  OTEL_RESOURCE_ATTRIBUTES?: string | undefined;
  OTEL_SERVICE_NAME: string;
}

export interface Telemetry {
  /** Whether spans are exported (an endpoint is set and the SDK is not disabled). */
  readonly exporting: boolean;
  /**
   * What the app says at start, on one line (its `msg` and fields): whether it exports, where to
   * (the endpoint without credentials: no user, password, query or headers) and with which sampler.
   */
  readonly startLine: { fields: Record<string, string | number | boolean>; msg: string };
  /**
   * Where failed exports and dropped spans are told (at most one line a minute of each kind; never
   * a header or a body): the app's logger, once it has one.
   */
  reportProblems(reporter: (fields: Record<string, string | number>, msg: string) => void): void;
  /** Exports the spans still buffered and stops (the last step of an app's shutdown). */
  shutdown(): Promise<void>;
}

/** What export problems are told to (startTelemetry's `reportProblems`); nothing until set. */
type ProblemReporter = (fields: Record<string, string | number>, msg: string) => void;

/**
 * Registers the process's context manager (AsyncLocalStorage), the W3C trace-context propagator
 * and the tracer provider (spans.ts: recorded spans as plain records, written to OTLP as they end).
 * Call once, first thing in main.ts.
 */
export function startTelemetry(
  env: TelemetryEnv,
  options: {
    /** false for a short-lived command: its one export is sent at once, without a worker thread. */
    exportThread?: boolean;
  } = {},
): Telemetry {
  const manager = new AsyncLocalStorageContextManager().enable();
  // Ours is the one registered unless another was first (a second start in one process: tests).
  if (context.setGlobalContextManager(manager)) contexts = manager;
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const to = exportTarget(env);
  let report: ProblemReporter | undefined;
  const lastReported = new Map<string, number>();
  const exporter = to
    ? new OtlpSpanExporter({
        url: to.url,
        protocol: to.protocol,
        gzip: to.compression === "gzip",
        headers: to.headers,
        timeoutMs: to.timeoutMs,
        intervalMs: to.intervalMs,
        exportThread: options.exportThread ?? true,
        resource: {
          "telemetry.sdk.language": "nodejs",
          "telemetry.sdk.name": "botdir",
          ...(env.OTEL_RESOURCE_ATTRIBUTES ? parseKeyValues(env.OTEL_RESOURCE_ATTRIBUTES) : {}),
          "service.name": env.OTEL_SERVICE_NAME,
        },
        scope: "botdir",
        // At most one line a minute of each kind (an unreachable collector fails every second).
        onProblem: ({ kind, detail, count }) => {
          const now = Date.now();
          if (now - (lastReported.get(kind) ?? 0) < 60_000) return;
          lastReported.set(kind, now);
          report?.(
            { kind, detail, count },
            kind === "export_failed" ? "span export failed" : "spans dropped: the export buffer is full",
          );
        },
      })
    : undefined;
  const provider: TracerProvider = { getTracer: () => botdirTracerImpl };
  const registered = trace.setGlobalTracerProvider(provider);
  exporting = exporter !== undefined;
  // A second start in one process (tests) keeps the provider registered first.
  idsOnly = registered ? !exporting : idsOnly;
  if (registered) {
    records = recordingDecision(env, exporting);
    sink = exporter;
  }
  return {
    exporting,
    startLine: startLineOf(env, to),
    reportProblems: (reporter) => {
      report = reporter;
    },
    shutdown: async () => {
      await exporter?.shutdown();
    },
  };
}

/** The API's TracerProvider (one method). */
interface TracerProvider {
  getTracer(name: string): Tracer;
}

/**
 * Where spans are exported, read as the OpenTelemetry specification says: the signal's own
 * variables (OTEL_EXPORTER_OTLP_TRACES_*) before the general ones; a traces endpoint is used as it
 * is, a general one gets `/v1/traces`. Undefined where nothing is exported.
 */
export function exportTarget(env: TelemetryEnv):
  | {
      url: string;
      protocol: "http/protobuf" | "http/json";
      compression: "gzip" | "none";
      headers: Record<string, string>;
      timeoutMs: number;
      intervalMs: number;
    }
  | undefined {
  if (env.OTEL_SDK_DISABLED) return undefined;
  const url =
    env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
    (env.OTEL_EXPORTER_OTLP_ENDPOINT && `${env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, "")}/v1/traces`);
  if (!url) return undefined;
  const headers = env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? env.OTEL_EXPORTER_OTLP_HEADERS;
  return {
    url,
    protocol: env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf",
    compression: env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION ?? env.OTEL_EXPORTER_OTLP_COMPRESSION ?? "none",
    headers: headers ? (parseKeyValues(headers) ?? {}) : {},
    timeoutMs: env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT ?? env.OTEL_EXPORTER_OTLP_TIMEOUT ?? 10_000,
    intervalMs: env.OTEL_BSP_SCHEDULE_DELAY ?? 1_000,
  };
}

/** The sampler's name as OTEL_TRACES_SAMPLER spells it, with its ratio where it has one. */
function samplerName(env: TelemetryEnv): string {
  return env.OTEL_TRACES_SAMPLER.endsWith("traceidratio")
    ? `${env.OTEL_TRACES_SAMPLER} ${env.OTEL_TRACES_SAMPLER_ARG}`
    : env.OTEL_TRACES_SAMPLER;
}

/** A URL without its user, password, query and fragment (what a start line may show of an endpoint). */
export function withoutCredentials(url: string): string {
  const u = new URL(url);
  u.username = "";
  u.password = "";
  u.search = "";
  u.hash = "";
  return u.toString();
}

/**
 * Telemetry's start line (startTelemetry's `startLine`) for `env` and, where spans are exported,
 * the export's URL, protocol and compression.
 */
export function startLineOf(
  env: TelemetryEnv,
  to: { url: string; protocol: string; compression: string } | undefined,
): Telemetry["startLine"] {
  if (!to) {
    const why = env.OTEL_SDK_DISABLED ? "OTEL_SDK_DISABLED" : "no OTEL_EXPORTER_OTLP_ENDPOINT";
    return {
      fields: { tracing: "off", sampler: "always_off" },
      msg: `tracing off (${why}): nothing exported, trace ids kept`,
    };
  }
  const endpoint = withoutCredentials(to.url);
  const sampler = samplerName(env);
  return {
    fields: { tracing: "on", endpoint, protocol: to.protocol, compression: to.compression, sampler },
    msg: `tracing on: exporting to ${endpoint} (${to.protocol}, compression ${to.compression}), sampler ${sampler}`,
  };
}

let botdirTracer: Tracer | undefined;
/** Whether this process exports spans (startTelemetry with an endpoint). */
let exporting = false;
/**
 * The registered context manager, called directly on the hot paths (each job, each of a delivery's
 * steps, each log line): the API's `context.active()` looks the global up and checks its version
 * every time. Until startTelemetry registers it: the API's (a no-op manager).
 */
let contexts: Pick<ContextManager, "active" | "with"> = context;

/** The span of the active context, as `trace.getActiveSpan()`. */
function activeSpan(): Span | undefined {
  return trace.getSpan(contexts.active());
}
/**
 * Whether the registered provider records nothing (startTelemetry without an endpoint): its spans
 * are ids only. False without a provider, whose spans have no ids at all.
 */
let idsOnly = false;
/**
 * The trace id unsampledTraceId decided a request's new trace to be recorded under: the next new
 * trace (the request's server span, started right after) takes it, so that the trace is the one
 * that decision was for.
 */
let decidedTraceId: string | undefined;
/** Where recorded spans go when they end (startTelemetry's exporter); none: nothing is recorded. */
let sink: OtlpSpanExporter | undefined;

/**
 * Whether the registered provider's sampler records a span under a parent (its ids) or, without
 * one, a span starting the trace `traceId`: the standard samplers' decisions (OTEL_TRACES_SAMPLER),
 * taken without a context or a span, so that work the sampler would not record is not started at
 * all (no span, no context: as with tracing off).
 */
let records: (parent: SpanContext | undefined, traceId: string) => boolean = () => false;

function recordingDecision(env: TelemetryEnv, on: boolean): typeof records {
  if (!on) return () => false;
  const byRatio = ratioSampler(env.OTEL_TRACES_SAMPLER_ARG);
  const sampledParent = (parent: SpanContext) => (parent.traceFlags & TraceFlags.SAMPLED) !== 0;
  switch (env.OTEL_TRACES_SAMPLER) {
    case "always_on":
      return () => true;
    case "always_off":
      return () => false;
    case "traceidratio":
      return (_parent, traceId) => byRatio(traceId);
    case "parentbased_always_on":
      return (parent) => (parent ? sampledParent(parent) : true);
    case "parentbased_always_off":
      return (parent) => (parent ? sampledParent(parent) : false);
    case "parentbased_traceidratio":
      return (parent, traceId) => (parent ? sampledParent(parent) : byRatio(traceId));
  }
}

/**
 * The registered provider's tracer: a span the sampler records is a RecordedSpan (spans.ts), any
 * other is its ids only (the API's non-recording span), as the SDK's would be.
 */
const botdirTracerImpl: Tracer = {
  startSpan(name: string, options: SpanOptions = {}, ctx: Context = contexts.active()): Span {
    const parentSpan = options.root ? undefined : trace.getSpan(ctx);
    // A recorded parent's ids are ours, valid as made: only another span's are checked.
    let parent: SpanContext | undefined;
    if (parentSpan instanceof RecordedSpan) parent = parentSpan.ids;
    else {
      const given = parentSpan?.spanContext();
      parent = given && isSpanContextValid(given) ? given : undefined;
    }
    let traceId: string;
    if (parent) traceId = parent.traceId;
    else {
      traceId = decidedTraceId ?? newTraceId();
      decidedTraceId = undefined;
    }
    const recorded = sink !== undefined && records(parent, traceId);
    const ids: SpanContext = {
      traceId,
      spanId: newSpanId(),
      traceFlags: recorded ? TraceFlags.SAMPLED : TraceFlags.NONE,
    };
    if (!recorded || !sink) return trace.wrapSpanContext(ids);
    return new RecordedSpan(
      sink,
      ids,
      parent,
      name,
      options.kind ?? SpanKind.INTERNAL,
      options.attributes,
      options.links,
      options.startTime,
    );
  },
  startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    ...rest: [F] | [SpanOptions, F] | [SpanOptions, Context, F]
  ): ReturnType<F> {
    const fn = rest[rest.length - 1] as F;
    const options = (rest.length >= 2 ? rest[0] : {}) as SpanOptions;
    const parent = (rest.length === 3 ? rest[1] : contexts.active()) as Context;
    const span = botdirTracerImpl.startSpan(name, options, parent);
    return contexts.with(trace.setSpan(parent, span), () => fn(span)) as ReturnType<F>;
  },
} as Tracer;

/**
 * Whether work continuing a stored `traceparent` (a job's, a delivery's) is recorded: spans are
 * exported and the sampler records under that parent (a parent-based one: when its flag says
 * sampled). Where it is not, the work makes no span and enters no context (as with tracing off) and
 * takes its trace id from the `traceparent` itself.
 */
export function recordedUnder(traceparent: string | null | undefined): boolean {
  if (!exporting) return false;
  const parent = spanContextOf(traceparent);
  return parent ? records(parent, parent.traceId) : records(undefined, newTraceId());
}

/**
 * The trace id of a request's server span where spans are exported but the sampler does not record
 * it (undefined where it does, or where nothing is exported): the caller's (`continued`, a
 * `traceparent` when valid), else a new trace's, drawn here as the sampler decides on it. Such a
 * request then runs as with tracing off: no span object, no context, its span's ids made when read
 * (unrecordedServerIds). Where it is recorded, call startSpan for the server span next: a new trace
 * then takes the id decided here.
 */
export function unsampledTraceId(continued: string | string[] | undefined): string | undefined {
  if (!exporting) return undefined;
  const parent = continued === undefined ? undefined : parentIdsOf(continued);
  const traceId = parent ? parent.traceId : newTraceId();
  if (!records(parent, traceId)) return traceId;
  // Recorded: the server span started next (startSpan, in the SDK) is of this trace.
  if (!parent) decidedTraceId = traceId;
  return undefined;
}

/** A request's `traceparent` header's ids (read as the W3C propagator reads it), when valid. */
function parentIdsOf(traceparent: string | string[]): SpanContext | undefined {
  return (
    (typeof traceparent === "string" ? spanContextOf(traceparent) : undefined) ??
    trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent }))
  );
}

/** Whether spans are exported: links and the like are worth computing only then. */
export function tracesExported(): boolean {
  return exporting;
}

/**
 * The tracer of our spans. Taken once: before startTelemetry it is the API's proxy tracer, which
 * hands each span to the provider registered since.
 */
export function tracer(): Tracer {
  botdirTracer ??= trace.getTracer("botdir");
  return botdirTracer;
}

export interface SpanStart {
  /**
   * The work reads its trace (activeTraceparent, activeTraceId): where nothing is exported and no
   * span is active, it still runs in a new trace's ids (as a root span does). Other spans are then
   * not made at all: nothing would read them.
   */
  needsTrace?: boolean;
  kind?: SpanKind;
  attributes?: Attributes;
  links?: Link[];
  /** The parent (default: the active context); ROOT_CONTEXT with `root` starts a new trace. */
  parent?: Context;
  root?: boolean;
  /** Errors that are a normal outcome (e.g. BullMQ's DelayedError): thrown on, the span not failed. */
  expected?: (error: unknown) => boolean;
  /**
   * Nothing `fn` runs reads the span's context (no span below it, no log line that must carry its
   * ids: a client call): the span is made and ended, but no context is entered for it.
   */
  leaf?: boolean;
}

/**
 * Runs `fn` inside a new span (active for everything `fn` awaits), ends it when `fn` settles and
 * marks it failed when `fn` throws (the error's name only: messages may carry data).
 *
 * Not an async function: where no span is made (below), `fn`'s own promise is returned as it is,
 * without a wrapping promise and its extra microtask turns (a delivery passes four of these).
 */
export function inSpan<T>(name: string, start: SpanStart, fn: (span: Span) => Promise<T>): Promise<T> {
  const active = contexts.active();
  const parent = start.parent ?? active;
  // A child of a local span that is not recording would not be recorded either (every standard
  // sampler decides so: parent-based ones by the parent, ratio ones by the same trace id, always_on
  // records the parent): run `fn` in the parent instead. With tracing off, the trace id and the
  // server and consumer spans' ids stay, and the spans below them cost nothing.
  // Without an exporter nothing is recorded at all: a span below a known trace (a job's stored
  // context, a batch item's) adds nothing but its own id, so the work runs in that context.
  const current = start.root ? undefined : trace.getSpan(parent);
  if (current && (!exporting || (!start.links?.length && !current.isRecording()))) {
    const ids = current.spanContext();
    // Valid ids (ours, or a parsed traceparent's) without the API's hex checks: the only invalid
    // ones a span carries are the all-zero ids of a process without a provider.
    if (
      (!exporting || ids.isRemote !== true) &&
      ids.traceId !== INVALID_TRACE &&
      ids.spanId !== INVALID_SPAN
    ) {
      try {
        return parent === active ? fn(current) : contexts.with(parent, fn, undefined, current);
      } catch (error) {
        return Promise.reject(error);
      }
    }
  }
  if ((idsOnly || exporting) && !current && start.root !== true && start.needsTrace !== true) {
    // Outside any span (nothing exported, or a request or job the sampler does not record: such
    // work runs in no context, docs/performance.md "What tracing costs") and nothing reads a
    // trace: no span, no context.
    try {
      return fn(NO_SPAN);
    } catch (error) {
      return Promise.reject(error);
    }
  }
  if (idsOnly) {
    // Nothing is recorded: the span the SDK would make is ids and nothing else (AlwaysOffSampler),
    // made here without its sampler, attribute checks and span metrics.
    const span = trace.wrapSpanContext(unrecordedChildOf(start.root ? undefined : current?.spanContext()));
    try {
      return contexts.with(trace.setSpan(parent, span), fn, undefined, span);
    } catch (error) {
      return Promise.reject(error);
    }
  }
  return inNewSpan(name, start, parent, fn);
}

/**
 * `tracer().startSpan`, except where nothing is recorded (startTelemetry without an endpoint): the
 * span the SDK would make is then ids and nothing else (AlwaysOffSampler), and is made here without
 * the SDK's sampler, attribute checks and span metrics. For spans started outside `inSpan` (a
 * request's server span, a hand-off's producer span).
 */
export function startSpan(name: string, options: SpanOptions, parent: Context): Span {
  if (idsOnly) {
    return trace.wrapSpanContext(
      unrecordedChildOf(options.root ? undefined : trace.getSpan(parent)?.spanContext()),
    );
  }
  return tracer().startSpan(name, options, parent);
}

/**
 * The ids of a request's server span where nothing is exported, without a span or a context object
 * (requestContext makes them when something reads them): in the trace of the request's
 * `traceparent` when it has a valid one (read as the W3C propagator reads it), else of a new trace.
 * Undefined in a process without startTelemetry, whose spans have no ids.
 */
export function unrecordedServerIds(
  traceparent: string | string[] | undefined,
  unsampled?: string,
): SpanContext | undefined {
  // A request the sampler does not record (unsampledTraceId): its trace id is decided already.
  if (unsampled !== undefined) {
    return { traceId: unsampled, spanId: newSpanId(), traceFlags: TraceFlags.NONE };
  }
  if (!idsOnly) return undefined;
  return unrecordedChildOf(traceparent === undefined ? undefined : parentIdsOf(traceparent));
}

/** The ids of a span that is not recorded: in the trace of `parent`'s ids when valid, else a new trace. */
function unrecordedChildOf(parent: SpanContext | undefined): SpanContext {
  const traceId = parent && parent.traceId !== INVALID_TRACE ? parent.traceId : newTraceId();
  return { traceId, spanId: newSpanId(), traceFlags: TraceFlags.NONE };
}

function inNewSpan<T>(
  name: string,
  start: SpanStart,
  parent: Context,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  // Ours where spans are exported; else the registered one's (none: the API's, spans without ids).
  const span = (sink ? botdirTracerImpl : tracer()).startSpan(name, start, parent);
  let running: Promise<T>;
  try {
    running = start.leaf ? fn(span) : contexts.with(trace.setSpan(parent, span), fn, undefined, span);
  } catch (error) {
    running = Promise.reject(error);
  }
  return running.then(
    (value) => {
      span.end();
      return value;
    },
    (error: unknown) => {
      if (!start.expected?.(error)) failSpan(span, error);
      span.end();
      throw error;
    },
  );
}

/**
 * Marks `span` failed: `error.type` is a given kind (a string) or the error's name, never its
 * message (which may hold data).
 */
export function failSpan(span: Span, error: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR });
  const type = typeof error === "string" ? error : error instanceof Error ? error.name : "error";
  span.setAttribute("error.type", type);
}

/** The span handed to work that makes none: no ids, records nothing. */
const NO_SPAN: Span = trace.wrapSpanContext({
  traceId: "00000000000000000000000000000000",
  spanId: "0000000000000000",
  traceFlags: TraceFlags.NONE,
});

/**
 * Runs `fn` in `ctx` (a request's context, requestTrace) unless the request runs in it already (a
 * request whose server span is recorded). For the work of a request that reads its trace (a test
 * event's X-Webhook-Trace, a redelivery's new series) where no context is entered per request:
 * nothing is exported, or the sampler does not record the request.
 */
export function inContext<T>(ctx: Context | undefined, fn: () => T): T {
  if (!ctx || contexts.active() === ctx) return fn();
  return contexts.with(ctx, fn);
}

/** `trace_id` and `span_id` of `span` for a log line (nothing for a span without ids). */
export function spanLogFields(span: Span | undefined): Readonly<Record<string, string>> {
  return idsLogFields(span?.spanContext());
}

/** What spanLogFields gives for no span: one shared object, never written to (see loggerOptions). */
export const NO_TRACE_FIELDS: Readonly<Record<string, string>> = Object.freeze({});

/**
 * pino's `mixinMergeStrategy` for traceLogFields: a line outside any span (NO_TRACE_FIELDS) is
 * written as it is, with no object made to merge nothing into (pino's default assigns the line's
 * fields onto the mixin's object, one per line).
 */
export function mergeTraceFields(line: object, fields: object): object {
  return fields === NO_TRACE_FIELDS ? line : Object.assign(fields, line);
}

/** `trace_id` and `span_id` of a span's ids, for a log line; none for no ids or invalid ones. */
export function idsLogFields(ids: SpanContext | undefined): Readonly<Record<string, string>> {
  if (!ids || ids.traceId === INVALID_TRACE) return NO_TRACE_FIELDS;
  return { trace_id: ids.traceId, span_id: ids.spanId };
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const INVALID_TRACE = "00000000000000000000000000000000";
const INVALID_SPAN = "0000000000000000";

/**
 * `trace_id` of a stored `traceparent`, for a log line written outside any recorded span (the
 * dispatcher makes no span for a delivery where nothing is exported or the sampler does not record
 * it); nothing inside a recorded span (the mixin adds its ids) or without a valid `traceparent`.
 */
export function storedTraceLogFields(traceparent: string | null | undefined): Record<string, string> {
  if (exporting && activeSpan()?.isRecording()) return {};
  const traceId = traceIdOf(traceparent);
  return traceId ? { trace_id: traceId } : {};
}

/** The W3C `traceparent` of a span context, or null for an invalid one (no provider registered). */
export function traceparentOf(spanContext: SpanContext | undefined): string | null {
  if (!spanContext || !trace.isSpanContextValid(spanContext)) return null;
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, "0");
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The `traceparent` of the active span (or null). */
export function activeTraceparent(): string | null {
  return traceparentOf(activeSpan()?.spanContext());
}

/** Whether the active span is recorded (work inside a span the sampler records, spans exported). */
export function activeSpanRecorded(): boolean {
  return activeSpan()?.isRecording() === true;
}

/** The trace id of the active span: 32 lowercase hex characters, or null without one. */
export function activeTraceId(): string | null {
  return traceIdOfSpan(activeSpan());
}

/** The trace id of `span` (e.g. the one `inSpan` hands its callback), or null for a span without ids. */
export function traceIdOfSpan(span: Span | undefined): string | null {
  const id = span?.spanContext().traceId;
  return id && id !== INVALID_TRACE ? id : null;
}

/** The trace id of a stored `traceparent`, or null when there is none or it is malformed. */
export function traceIdOf(traceparent: string | null | undefined): string | null {
  const match = traceparent ? TRACEPARENT.exec(traceparent) : null;
  return match?.[1] && match[1] !== INVALID_TRACE ? match[1] : null;
}

/**
 * The remote span context of a stored `traceparent` (for a parent or a link), or undefined. Read
 * with one regular expression, as the W3C propagator would read it (version 00, no `tracestate`),
 * without the carrier and the context objects of `propagation.extract`: a dispatcher does it for
 * every job.
 */
export function spanContextOf(traceparent: string | null | undefined): SpanContext | undefined {
  const match = traceparent ? TRACEPARENT.exec(traceparent) : null;
  const [, traceId, spanId, flags] = match ?? [];
  if (!traceId || !spanId || !flags || traceId === INVALID_TRACE || spanId === INVALID_SPAN) return undefined;
  return { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
}

/** A context whose parent is the stored `traceparent` (ROOT_CONTEXT without a valid one). */
export function contextOf(traceparent: string | null | undefined): Context {
  const remote = spanContextOf(traceparent);
  return remote ? trace.setSpanContext(ROOT_CONTEXT, remote) : ROOT_CONTEXT;
}

/** pino `mixin`: `trace_id` and `span_id` on every line written inside a span (nothing otherwise). */
export function traceLogFields(): Readonly<Record<string, string>> {
  return spanLogFields(activeSpan());
}

/** Adds a link from `span` to the span of a stored `traceparent` (nothing when there is none). */
export function linkTo(span: Span, traceparent: string | null | undefined): void {
  const linked = spanContextOf(traceparent);
  if (linked) span.addLink({ context: linked });
}
