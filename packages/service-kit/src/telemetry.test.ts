import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { propagation, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import express from "express";
import { pino } from "pino";
import {
  earlyRequestContext,
  errorHandler,
  loggerOptions,
  requestContext,
  requestKeptTraceparent,
  requestTrace,
  requestTraceparent,
} from "./http.js";
import {
  activeTraceId,
  contextOf,
  exportTarget,
  inContext,
  inSpan,
  parseKeyValues,
  spanContextOf,
  startLineOf,
  startTelemetry,
  TelemetryEnvFields,
  traceIdOf,
  traceIdOfSpan,
  traceparentOf,
  tracer,
} from "./telemetry.js";
import { waitFor } from "./testing.js";

// No endpoint: nothing is exported, but every span still has ids (AlwaysOff sampler).
const telemetry = startTelemetry({
  OTEL_TRACES_SAMPLER: "parentbased_always_on",
  OTEL_TRACES_SAMPLER_ARG: 1,
  OTEL_SDK_DISABLED: false,
  OTEL_SERVICE_NAME: "botdir-test",
});
afterAll(() => telemetry.shutdown());

const INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("startTelemetry without an endpoint", () => {
  it("then nothing is exported, yet a span that needs a trace has a valid trace id that its children share", async () => {
    expect(telemetry.exporting).toBe(false);
    const ids = await inSpan("outer", { needsTrace: true }, async (outer) => {
      expect(outer.isRecording()).toBe(false);
      const inner = await inSpan("inner", {}, async () => activeTraceId());
      return { outer: outer.spanContext().traceId, inner };
    });
    expect(ids.outer).toMatch(/^[0-9a-f]{32}$/);
    expect(ids.outer).not.toBe("0".repeat(32));
    expect(ids.inner).toBe(ids.outer);
  });

  it("when a stored traceparent is the parent, then the span continues its trace", async () => {
    const traceId = await inSpan("child", { parent: contextOf(INCOMING) }, async () => activeTraceId());
    expect(traceId).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(traceIdOf(INCOMING)).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(traceIdOf("garbage")).toBeNull();
  });

  it("when a span is started outside any other, then its traceparent is a W3C traceparent", () => {
    const span = tracer().startSpan("x");
    expect(traceparentOf(span.spanContext())).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    span.end();
  });
});

describe("requestContext and the log mixin", () => {
  let server: Server;
  let port: number;
  const lines: Record<string, unknown>[] = [];
  const stream = { write: (line: string) => void lines.push(JSON.parse(line)) };
  const logged = (msg: string) => waitFor(() => lines.find((l) => l.msg === msg), `log line "${msg}"`);
  let seenInHandler: string | null = null;
  let seenWithoutContext: string | null = "unset";
  let traceparentInHandler: string | null = null;

  beforeAll(async () => {
    const logger = pino(loggerOptions("test", "info", { nodeEnv: "production", tty: false }), stream);
    const app = express();
    app.use(requestContext(logger));
    app.get("/things/:id", (_req, res) => {
      // Nothing is exported: the request runs in no context; a route that reads its trace enters it.
      seenWithoutContext = activeTraceId();
      traceparentInHandler = requestTraceparent(res);
      inContext(requestTrace(res), () => {
        seenInHandler = activeTraceId();
        logger.info({ event: "inside" }, "inside the request");
      });
      res.json({ ok: true });
    });
    app.get("/quiet", (_req, res) => {
      res.json({ ok: true });
    });
    app.get("/kept", (_req, res) => {
      res.json({ kept: requestKeptTraceparent(res) });
    });
    server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("when a request carries a traceparent, then its trace (read in its context) and its log lines are that trace, and no context is entered for it", async () => {
    const answer = await fetch(`http://127.0.0.1:${port}/things/42`, { headers: { traceparent: INCOMING } });
    expect(answer.status).toBe(200);
    expect(seenWithoutContext).toBeNull();
    expect(seenInHandler).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(traceparentInHandler).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$/);
    const request = await logged("request");
    const inside = await logged("inside the request");
    expect(inside.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(inside.span_id).toMatch(/^[0-9a-f]{16}$/);
    expect(request.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    // The request line names the request's server span, as the lines in its context.
    expect(request.span_id).toBe(inside.span_id);
    expect(request.route).toBe("/things/:id");
  });

  it("when nothing reads a request's trace, then its line has ids only where the caller sent a trace", async () => {
    await fetch(`http://127.0.0.1:${port}/quiet`, {
      headers: { traceparent: INCOMING, "x-request-id": "quiet-1" },
    });
    await fetch(`http://127.0.0.1:${port}/quiet`, { headers: { "x-request-id": "quiet-2" } });
    const continued = await waitFor(() => lines.find((l) => l.reqId === "quiet-1"), "the first quiet line");
    const untraced = await waitFor(() => lines.find((l) => l.reqId === "quiet-2"), "the second quiet line");
    expect(continued.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(continued.span_id).toMatch(/^[0-9a-f]{16}$/);
    expect(continued.span_id).not.toBe("00f067aa0ba902b7");
    // A trace that nothing keeps and nobody was given: no ids are made for it.
    expect(untraced).not.toHaveProperty("trace_id");
    expect(untraced).not.toHaveProperty("span_id");
  });

  it("when work keeps a request's trace (a vote's row), then it keeps the caller's trace continued, and none without one: no ids made, none on the line", async () => {
    const continued = await fetch(`http://127.0.0.1:${port}/kept`, {
      headers: { traceparent: INCOMING, "x-request-id": "kept-1" },
    });
    expect(((await continued.json()) as { kept: string | null }).kept).toMatch(
      /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$/,
    );
    const line = await waitFor(() => lines.find((l) => l.reqId === "kept-1"), "the first kept line");
    expect(line.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");

    const alone = await fetch(`http://127.0.0.1:${port}/kept`, { headers: { "x-request-id": "kept-2" } });
    expect(await alone.json()).toEqual({ kept: null });
    const untraced = await waitFor(() => lines.find((l) => l.reqId === "kept-2"), "the second kept line");
    expect(untraced).not.toHaveProperty("trace_id");
  });

  it("when a request carries none, then it gets a new trace of its own", async () => {
    await fetch(`http://127.0.0.1:${port}/things/43`);
    expect(seenInHandler).toMatch(/^[0-9a-f]{32}$/);
    expect(seenInHandler).not.toBe("4bf92f3577b34da6a3ce929d0e0e4736");
  });

  it("when a log line is written outside any span, then it has no trace fields", async () => {
    const logger = pino(loggerOptions("test", "info", { nodeEnv: "production", tty: false }), stream);
    logger.info({}, "outside");
    const line = await logged("outside");
    expect(line.trace_id).toBeUndefined();
  });
});

describe("requestContext with tracing off, below the info level", () => {
  it("when nothing reads a request's trace, then its server span is never made; the 5xx line makes it, in the incoming trace", async () => {
    const lines: Record<string, unknown>[] = [];
    const stream = { write: (line: string) => void lines.push(JSON.parse(line)) };
    const logger = pino(loggerOptions("test", "warn", { nodeEnv: "production", tty: false }), stream);
    const kept: unknown[] = [];
    const app = express();
    app.use(requestContext(logger));
    app.get("/quiet", (_req, res) => {
      // Runs after requestContext's own finish listener: what it left in res.locals.
      res.on("finish", () => kept.push(res.locals.trace));
      res.json({ ok: true });
    });
    app.get("/broken", () => {
      throw new Error("broken");
    });
    app.use(errorHandler(logger));
    const server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      expect(
        (await fetch(`http://127.0.0.1:${port}/quiet`, { headers: { traceparent: INCOMING } })).status,
      ).toBe(200);
      await waitFor(() => kept.length === 1, "the quiet request's finish");
      expect(kept[0]).toBeNull();
      await fetch(`http://127.0.0.1:${port}/broken`, { headers: { traceparent: INCOMING } });
      const failed = await waitFor(() => lines.find((l) => l.msg === "request failed"), "the 5xx line");
      expect(failed.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
      expect(lines.find((l) => l.msg === "request")).toBeUndefined();
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe("earlyRequestContext with tracing off", () => {
  it("when a request is refused before Express, then its request line still carries the incoming trace", async () => {
    const lines: Record<string, unknown>[] = [];
    const stream = { write: (line: string) => void lines.push(JSON.parse(line)) };
    const logger = pino(loggerOptions("test", "info", { nodeEnv: "production", tty: false }), stream);
    const early = earlyRequestContext(logger);
    const server = createServer((req, res) => {
      early(req, res, "/api/v1/bots/:id/check");
      res.statusCode = 401;
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      await fetch(`http://127.0.0.1:${port}/api/v1/bots/1/check`, { headers: { traceparent: INCOMING } });
      const line = await waitFor(() => lines.find((l) => l.msg === "request"), "the request line");
      expect(line).toMatchObject({ trace_id: "4bf92f3577b34da6a3ce929d0e0e4736", status: 401 });
      expect(line.span_id).toMatch(/^[0-9a-f]{16}$/);
      expect(line.span_id).not.toBe("00f067aa0ba902b7");
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe("TelemetryEnvFields", () => {
  it("accepts the standard samplers and refuses a protocol other than http/json", () => {
    expect(TelemetryEnvFields.OTEL_TRACES_SAMPLER.parse("parentbased_traceidratio")).toBe(
      "parentbased_traceidratio",
    );
    expect(TelemetryEnvFields.OTEL_TRACES_SAMPLER.safeParse("sometimes").success).toBe(false);
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_PROTOCOL.parse(undefined)).toBe("http/protobuf");
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_PROTOCOL.parse("http/json")).toBe("http/json");
    const grpc = TelemetryEnvFields.OTEL_EXPORTER_OTLP_PROTOCOL.safeParse("grpc");
    expect(grpc.success).toBe(false);
    expect(grpc.error?.issues[0]?.message).toMatch(/grpc is not supported/);
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_COMPRESSION.parse(undefined)).toBe("none");
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_COMPRESSION.safeParse("zstd").success).toBe(false);
    expect(TelemetryEnvFields.OTEL_TRACES_SAMPLER_ARG.safeParse("1.5").success).toBe(false);
  });

  it("reads resource attributes and headers as key=value pairs", () => {
    expect(parseKeyValues("deployment.environment=prod, team=votes%20core")).toEqual({
      "deployment.environment": "prod",
      team: "votes core",
    });
    expect(parseKeyValues("novalue")).toBeNull();
  });
});

describe("inSpan with tracing off", () => {
  it("when the parent is a local span that is not recording, then the work runs in the parent (same ids, no span made)", async () => {
    const seen = await inSpan("server", { needsTrace: true }, async (server) => {
      const inner = await inSpan("pg.statement", {}, async (span) => span.spanContext().spanId);
      return { server: server.spanContext().spanId, inner };
    });
    expect(seen.server).toMatch(/^[0-9a-f]{16}$/);
    expect(seen.server).not.toBe("0".repeat(16));
    expect(seen.inner).toBe(seen.server);
  });

  it("when the parent is a remote context (a job's traceparent) and nothing is exported, then the work runs in that context, its trace id active", async () => {
    const seen = await inSpan("process", { parent: contextOf(INCOMING) }, async (span) => ({
      ids: span.spanContext(),
      active: activeTraceId(),
    }));
    expect(seen.active).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    expect(seen.ids.spanId).toBe("00f067aa0ba902b7");
  });

  it("when work runs in a job's context, then the span handed to it has the job's trace id (traceIdOfSpan), and a span without ids has none", async () => {
    const seen = await inSpan("child", { parent: contextOf(INCOMING) }, async (span) => {
      const post = await inSpan("POST", {}, async (post) => traceIdOfSpan(post));
      return { outer: traceIdOfSpan(span), post };
    });
    expect(seen).toEqual({
      outer: "4bf92f3577b34da6a3ce929d0e0e4736",
      post: "4bf92f3577b34da6a3ce929d0e0e4736",
    });
    const noIds = trace.wrapSpanContext({ traceId: "0".repeat(32), spanId: "0".repeat(16), traceFlags: 0 });
    expect(traceIdOfSpan(noIds)).toBeNull();
    expect(traceIdOfSpan(undefined)).toBeNull();
  });

  it("when no span is active and the work needs no trace, then with nothing exported no span is made: the work gets a span without ids and runs in no context", async () => {
    const seen = await inSpan("pg.statement", {}, async (span) => ({
      span: traceIdOfSpan(span),
      active: activeTraceId(),
    }));
    expect(seen).toEqual({ span: null, active: null });
  });

  it("when a span starts a trace of its own (root), then it gets new ids even with tracing off", async () => {
    const traceId = await inSpan("batch", { root: true, parent: contextOf(INCOMING) }, async () =>
      activeTraceId(),
    );
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(traceId).not.toBe("4bf92f3577b34da6a3ce929d0e0e4736");
  });
});

describe("spanContextOf", () => {
  it("reads a stored traceparent as the W3C propagator does, and refuses what it refuses", () => {
    const inputs = [
      INCOMING,
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
      `00-${"0".repeat(32)}-00f067aa0ba902b7-01`,
      `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`,
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
      "garbage",
    ];
    for (const traceparent of inputs) {
      const extracted = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent }));
      expect([traceparent, spanContextOf(traceparent)]).toEqual([traceparent, extracted]);
    }
    expect(spanContextOf(INCOMING)).toEqual({
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: 1,
      isRemote: true,
    });
    expect(spanContextOf(null)).toBeUndefined();
  });
});

describe("inSpan without a span of its own", () => {
  it("when the work runs in the parent, then its own promise is returned, not a wrapper", async () => {
    const none = Promise.resolve(6);
    expect(inSpan("pg.statement", {}, () => none)).toBe(none);
    await inSpan("server", { needsTrace: true }, async () => {
      const work = Promise.resolve(7);
      expect(inSpan("pg.statement", {}, () => work)).toBe(work);
      const job = Promise.resolve(8);
      expect(inSpan("process", { parent: contextOf(INCOMING) }, () => job)).toBe(job);
    });
  });

  it("when the work throws at once, then the promise rejects (nothing is thrown to the caller)", async () => {
    const fails = () => {
      throw new TypeError("boom");
    };
    await expect(inSpan("inner", {}, fails)).rejects.toThrow("boom");
    await expect(
      inSpan("server", { needsTrace: true }, async () => inSpan("inner", {}, fails)),
    ).rejects.toThrow("boom");
    await expect(inSpan("process", { parent: contextOf(INCOMING) }, fails)).rejects.toThrow("boom");
    await expect(inSpan("batch", { root: true }, fails)).rejects.toThrow("boom");
  });

  it("when a span starts a trace with tracing off, then it is not recorded, not sampled, and its children share its ids", async () => {
    const seen = await inSpan("batch", { root: true, parent: contextOf(INCOMING) }, async (span) => ({
      recording: span.isRecording(),
      ids: span.spanContext(),
      active: activeTraceId(),
      child: await inSpan("webhook.deliver", {}, async (child) => child.spanContext().spanId),
    }));
    expect(seen.recording).toBe(false);
    expect(seen.ids.traceFlags).toBe(0);
    expect(seen.ids.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(seen.active).toBe(seen.ids.traceId);
    expect(seen.child).toBe(seen.ids.spanId);
  });
});

describe("exportTarget", () => {
  const base = {
    OTEL_TRACES_SAMPLER: "always_on" as const,
    OTEL_TRACES_SAMPLER_ARG: 1,
    OTEL_SDK_DISABLED: false,
    OTEL_SERVICE_NAME: "botdir-test",
  };
  it("when only the general variables are set, then /v1/traces is appended and their protocol, compression, headers and timeout hold", () => {
    expect(
      exportTarget({
        ...base,
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_COMPRESSION: "gzip",
        OTEL_EXPORTER_OTLP_HEADERS: "x-key=a%20b",
        OTEL_EXPORTER_OTLP_TIMEOUT: 2500,
      }),
    ).toEqual({
      url: "http://collector:4318/v1/traces",
      protocol: "http/json",
      compression: "gzip",
      headers: { "x-key": "a b" },
      timeoutMs: 2500,
      intervalMs: 1000,
    });
  });

  it("when the traces variables are set, then each wins over its general one and the traces endpoint is used as it is", () => {
    expect(
      exportTarget({
        ...base,
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://traces.example/otlp/spans",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf",
        OTEL_EXPORTER_OTLP_COMPRESSION: "none",
        OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: "gzip",
        OTEL_EXPORTER_OTLP_HEADERS: "a=1",
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: "b=2",
        OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: 700,
        OTEL_BSP_SCHEDULE_DELAY: 5000,
      }),
    ).toEqual({
      url: "https://traces.example/otlp/spans",
      protocol: "http/protobuf",
      compression: "gzip",
      headers: { b: "2" },
      timeoutMs: 700,
      intervalMs: 5000,
    });
  });

  it("when no endpoint is set or the SDK is disabled, then nothing is exported", () => {
    expect(exportTarget(base)).toBeUndefined();
    expect(
      exportTarget({
        ...base,
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
        OTEL_SDK_DISABLED: true,
      }),
    ).toBeUndefined();
  });

  it("refuses a traces protocol, timeout or export delay that is not one, in one sentence", () => {
    expect(
      TelemetryEnvFields.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL.safeParse("grpc").error?.issues[0]?.message,
    ).toMatch(/^must be http\/protobuf or http\/json/);
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_TIMEOUT.safeParse("soon").success).toBe(false);
    expect(TelemetryEnvFields.OTEL_EXPORTER_OTLP_TIMEOUT.parse("1500")).toBe(1500);
    expect(TelemetryEnvFields.OTEL_BSP_SCHEDULE_DELAY.safeParse("0").error?.issues[0]?.message).toBe(
      "must be at least 1 millisecond",
    );
    expect(TelemetryEnvFields.OTEL_BSP_SCHEDULE_DELAY.parse("250")).toBe(250);
  });
});

describe("the start line", () => {
  const env = {
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: 0.1,
    OTEL_SDK_DISABLED: false,
    OTEL_SERVICE_NAME: "botdir-test",
  } as const;

  it("when spans are exported, then it names the endpoint without its credentials, the protocol and the sampler", () => {
    const line = startLineOf(env, {
      url: "https://user:secret@collector.example:4318/v1/traces?api_key=k",
      protocol: "http/protobuf",
      compression: "gzip",
    });
    expect(line.msg).toBe(
      "tracing on: exporting to https://collector.example:4318/v1/traces (http/protobuf, compression gzip), sampler parentbased_traceidratio 0.1",
    );
    expect(JSON.stringify(line)).not.toMatch(/secret|user|api_key/);
    expect(line.fields).toMatchObject({ tracing: "on", sampler: "parentbased_traceidratio 0.1" });
  });

  it("when nothing is exported, then it says so and why", () => {
    expect(startLineOf(env, undefined).msg).toBe(
      "tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT): nothing exported, trace ids kept",
    );
    expect(startLineOf({ ...env, OTEL_SDK_DISABLED: true }, undefined).msg).toMatch(
      /^tracing off \(OTEL_SDK_DISABLED\)/,
    );
  });
});
