import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { SpanKind, SpanStatusCode, TraceFlags } from "@opentelemetry/api";
import { build } from "esbuild";
import protobuf from "protobufjs";
import { newSpanId, newTraceId, OtlpSpanExporter, ProtoWriter, RecordedSpan, ratioSampler } from "./spans.js";
import { waitFor } from "./testing.js";

// The messages of opentelemetry-proto (collector/trace/v1, trace/v1, common/v1, resource/v1) that
// an export holds, as the specification defines them: an independent decoder of what spans.ts writes.
const OTLP = protobuf
  .parse(`
syntax = "proto3";
package otlp;
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope { string name = 1; string version = 2; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message Status { string message = 2; int32 code = 3; }
message Link {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4;
  uint32 dropped_attributes_count = 5; fixed32 flags = 6;
}
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10;
  repeated Link links = 13; Status status = 15; fixed32 flags = 16;
}
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
`)
  .root.lookupType("otlp.ExportTraceServiceRequest");

interface Received {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

let server: Server;
let url: string;
const received: Received[] = [];
let answer = 200;

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(answer).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
beforeEach(() => {
  received.length = 0;
  answer = 200;
});

const exporters: OtlpSpanExporter[] = [];
afterEach(async () => {
  await Promise.all(exporters.splice(0).map((e) => e.shutdown()));
});

function exporter(options: Partial<ConstructorParameters<typeof OtlpSpanExporter>[0]> = {}) {
  const e = new OtlpSpanExporter({
    url,
    protocol: "http/protobuf",
    gzip: false,
    headers: { "x-api-key": "k" },
    resource: { "service.name": "botdir-test", "deployment.environment": "test" },
    scope: "botdir",
    intervalMs: 60_000,
    ...options,
  });
  exporters.push(e);
  return e;
}

const hexOf = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
/** Epoch nanoseconds of epoch milliseconds with a fraction, computed exactly with BigInt. */
const exactNanos = (ms: number): bigint => {
  const whole = Math.floor(ms);
  return BigInt(whole) * 1_000_000n + BigInt(Math.round((ms - whole) * 1e6));
};
const PARENT = { traceId: newTraceId(), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED, isRemote: true };

/** Two spans: a server span continuing a remote parent, with every kind of attribute and a link; a child that failed. */
function endTwoSpans(sink: OtlpSpanExporter) {
  const server = new RecordedSpan(
    sink,
    { traceId: PARENT.traceId, spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED },
    PARENT,
    "GET",
    SpanKind.SERVER,
    { "http.request.method": "GET", "botdir.attempt": 3, ratio: 0.25, cached: true, big: -7 },
    [
      {
        context: { traceId: newTraceId(), spanId: newSpanId(), traceFlags: TraceFlags.NONE, isRemote: true },
      },
    ],
    undefined,
  );
  server.setAttribute("http.response.status_code", 201);
  server.setAttribute("tags", ["a", "é"]);
  server.updateName("GET /api/v1/bots/:id/check");
  const child = new RecordedSpan(
    sink,
    { traceId: PARENT.traceId, spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED },
    server.spanContext(),
    "pg.check",
    SpanKind.CLIENT,
    { "db.system.name": "postgresql" },
    undefined,
    undefined,
  );
  child.setStatus({ code: SpanStatusCode.ERROR });
  child.setAttribute("error.type", "TimeoutError");
  child.end();
  server.end();
  // Ended spans take nothing more.
  server.setAttribute("late", "x");
  return { server, child };
}

describe("OtlpSpanExporter, http/protobuf", () => {
  it("when spans end and the buffer is sent, then one ExportTraceServiceRequest carries them as opentelemetry-proto defines them", async () => {
    const sink = exporter();
    const before = Date.now();
    const { server, child } = endTwoSpans(sink);
    await sink.flush();
    expect(received).toHaveLength(1);
    const [got] = received;
    expect(got?.headers["content-type"]).toBe("application/x-protobuf");
    expect(got?.headers["x-api-key"]).toBe("k");
    const request = OTLP.toObject(OTLP.decode(got?.body as Buffer), { longs: String, bytes: Array }) as {
      resourceSpans: {
        resource: { attributes: { key: string; value: Record<string, unknown> }[] };
        scopeSpans: { scope: { name: string }; spans: Record<string, unknown>[] }[];
      }[];
    };
    expect(request.resourceSpans).toHaveLength(1);
    const [rs] = request.resourceSpans;
    expect(rs?.resource.attributes).toEqual([
      { key: "service.name", value: { stringValue: "botdir-test" } },
      { key: "deployment.environment", value: { stringValue: "test" } },
    ]);
    expect(rs?.scopeSpans[0]?.scope.name).toBe("botdir");
    const spans = rs?.scopeSpans[0]?.spans as Record<string, unknown>[];
    expect(spans.map((s) => s.name)).toEqual(["pg.check", "GET /api/v1/bots/:id/check"]);
    // biome-ignore lint/suspicious/noExplicitAny: a decoded message, checked field by field below
    const [c, s] = spans as [any, any];
    expect(hexOf(s.traceId)).toBe(PARENT.traceId);
    expect(hexOf(s.spanId)).toBe(server.spanContext().spanId);
    expect(hexOf(s.parentSpanId)).toBe(PARENT.spanId);
    expect(hexOf(c.parentSpanId)).toBe(server.spanContext().spanId);
    expect(s.kind).toBe(2); // SPAN_KIND_SERVER
    expect(c.kind).toBe(3); // SPAN_KIND_CLIENT
    const startNs = BigInt(s.startTimeUnixNano);
    const endNs = BigInt(s.endTimeUnixNano);
    expect(startNs).toBeGreaterThanOrEqual(BigInt(before - 1) * 1_000_000n);
    expect(endNs).toBeGreaterThanOrEqual(startNs);
    expect(endNs).toBeLessThanOrEqual(BigInt(Date.now() + 1) * 1_000_000n);
    expect(s.attributes).toEqual([
      { key: "http.request.method", value: { stringValue: "GET" } },
      { key: "botdir.attempt", value: { intValue: "3" } },
      { key: "ratio", value: { doubleValue: 0.25 } },
      { key: "cached", value: { boolValue: true } },
      { key: "big", value: { intValue: "-7" } },
      { key: "http.response.status_code", value: { intValue: "201" } },
      {
        key: "tags",
        value: { arrayValue: { values: [{ stringValue: "a" }, { stringValue: "é" }] } },
      },
    ]);
    expect(s.links).toHaveLength(1);
    expect((s.links as unknown as { flags: number }[])[0]?.flags).toBe(0x300);
    // Sampled, its parent remote (HAS_IS_REMOTE | IS_REMOTE); the child's parent is local.
    expect(s.flags).toBe(0x301);
    expect(c.flags).toBe(0x101);
    expect(s.status).toBeUndefined();
    expect(c.status).toEqual({ code: 2 });
    expect(c.attributes).toContainEqual({ key: "error.type", value: { stringValue: "TimeoutError" } });
    expect(child.isRecording()).toBe(false);
  });

  it("when gzip is set, then the body is gzip-compressed and says so", async () => {
    const sink = exporter({ gzip: true });
    endTwoSpans(sink);
    await sink.flush();
    const [got] = received;
    expect(got?.headers["content-encoding"]).toBe("gzip");
    const request = OTLP.toObject(OTLP.decode(gunzipSync(got?.body as Buffer))) as {
      resourceSpans: { scopeSpans: { spans: unknown[] }[] }[];
    };
    expect(request.resourceSpans[0]?.scopeSpans[0]?.spans).toHaveLength(2);
  });

  it("when exports are sent from this thread (a command's), then the collector gets the same request as from the export thread, and a refusal is reported alike", async () => {
    const sent: Received[] = [];
    for (const exportThread of [true, false]) {
      const problems: string[] = [];
      const sink = exporter({ exportThread, gzip: true, onProblem: (p) => problems.push(p.detail) });
      const { server } = endTwoSpans(sink);
      await sink.flush();
      sent.push(received.pop() as Received);
      expect(server.spanContext().traceId).toBe(PARENT.traceId);
      answer = 500;
      endTwoSpans(sink);
      await sink.flush();
      answer = 200;
      expect(problems).toEqual(["the collector answered 500"]);
      expect(sink.counts).toMatchObject({ exported: 1, failedExports: 1 });
    }
    const [thread, here] = sent as [Received, Received];
    const decode = (r: Received) => OTLP.toObject(OTLP.decode(gunzipSync(r.body)), { longs: String });
    // The spans differ only in their ids and times: compare the requests' shapes and headers.
    const shape = (r: Received) =>
      JSON.stringify(decode(r), (key, value) =>
        ["traceId", "spanId", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano"].includes(key)
          ? "·"
          : value,
      );
    expect(shape(here)).toBe(shape(thread));
    for (const header of ["content-type", "content-encoding", "x-api-key"]) {
      expect(here.headers[header]).toBe(thread.headers[header]);
    }
    expect(Number(here.headers["content-length"])).toBe(here.body.length);
  });

  it("when an export goes to the export thread, then no ArrayBuffer of this thread is detached (V8's protector for every Buffer read stays intact)", async () => {
    // A process of its own (bundled, so that no loader thread of its own detaches anything), so
    // that V8 says which protectors it invalidates: detaching an ArrayBuffer (a transfer to the
    // thread) would deoptimise every function that reads a Buffer or typed array.
    const dir = mkdtempSync(path.join(tmpdir(), "botdir-export-"));
    const entry = path.join(dir, "export.mjs");
    await build({
      stdin: {
        contents: `
          import { OtlpSpanExporter, RecordedSpan, newSpanId, newTraceId } from "./spans.ts";
          const sink = new OtlpSpanExporter({
            url: process.argv[2], protocol: "http/protobuf", gzip: false, headers: {},
            resource: { "service.name": "botdir-test" }, scope: "botdir", intervalMs: 60_000,
            onProblem: (p) => console.log("problem: " + p.detail),
          });
          for (let i = 0; i < 200; i++) {
            new RecordedSpan(sink, { traceId: newTraceId(), spanId: newSpanId(), traceFlags: 1 }, undefined,
              "span " + i, 0, { i }, undefined, undefined).end();
          }
          console.log("exporting");
          await sink.flush();
          await sink.shutdown();
          console.log("exported " + sink.counts.exported);
        `,
        resolveDir: import.meta.dirname,
        loader: "ts",
      },
      bundle: true,
      platform: "node",
      format: "esm",
      outfile: entry,
      logLevel: "silent",
    });
    try {
      const output = await new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ["--trace-protector-invalidation", entry, url], {
          stdio: ["ignore", "pipe", "pipe"],
        });
        let out = "";
        const add = (c: Buffer) => {
          out += c;
        };
        child.stdout.on("data", add);
        child.stderr.on("data", add);
        child.once("error", reject);
        child.once("exit", () => resolve(out));
      });
      expect(output).toContain("exported 1");
      expect(received).toHaveLength(1);
      const request = OTLP.toObject(OTLP.decode(received[0]?.body as Buffer)) as {
        resourceSpans: { scopeSpans: { spans: unknown[] }[] }[];
      };
      expect(request.resourceSpans[0]?.scopeSpans[0]?.spans).toHaveLength(200);
      expect(output).not.toContain("Invalidating protector cell ArrayBufferDetaching");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("when nothing ended since the last export, then nothing is sent", async () => {
    const sink = exporter();
    await sink.flush();
    expect(received).toHaveLength(0);
  });

  it("when many spans end, then a large buffer is sent without waiting for the interval, and every span arrives once", async () => {
    const sink = exporter({ flushBytes: 16 * 1024 });
    const names = new Set<string>();
    for (let i = 0; i < 2_000; i++) {
      const span = new RecordedSpan(
        sink,
        { traceId: newTraceId(), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED },
        undefined,
        `span ${i}`,
        SpanKind.INTERNAL,
        { i },
        undefined,
        undefined,
      );
      span.end();
      names.add(`span ${i}`);
    }
    // The interval is a minute: only the size threshold sends.
    await waitFor(async () => received.length > 0 || undefined, "an export sent by size", 10_000);
    await sink.flush();
    const seen = received.flatMap((r) => {
      const request = OTLP.toObject(OTLP.decode(r.body)) as {
        resourceSpans: { scopeSpans: { spans: { name: string }[] }[] }[];
      };
      return request.resourceSpans.flatMap((rs) =>
        rs.scopeSpans.flatMap((ss) => ss.spans.map((s) => s.name)),
      );
    });
    expect(seen).toHaveLength(2_000);
    expect(new Set(seen)).toEqual(names);
  });

  it("when the collector refuses an export, then it is counted and reported, and the next export is sent", async () => {
    const problems: string[] = [];
    const sink = exporter({ onProblem: (p) => problems.push(`${p.kind}: ${p.detail}`) });
    answer = 503;
    endTwoSpans(sink);
    await sink.flush();
    expect(sink.counts.failedExports).toBe(1);
    expect(problems).toEqual(["export_failed: the collector answered 503"]);
    answer = 200;
    endTwoSpans(sink);
    await sink.flush();
    expect(sink.counts.exported).toBe(1);
  });

  it("when the buffer is full, then further spans are dropped and counted, never held", async () => {
    const problems: string[] = [];
    const sink = exporter({ maxBufferedBytes: 2_000, onProblem: (p) => problems.push(p.kind) });
    for (let i = 0; i < 100; i++) endTwoSpans(sink);
    expect(sink.counts.dropped).toBeGreaterThan(0);
    expect(problems[0]).toBe("spans_dropped");
    await sink.flush();
    const request = OTLP.toObject(OTLP.decode(received[0]?.body as Buffer)) as {
      resourceSpans: { scopeSpans: { spans: unknown[] }[] }[];
    };
    expect(request.resourceSpans[0]?.scopeSpans[0]?.spans.length).toBe(200 - sink.counts.dropped);
  });
});

describe("OtlpSpanExporter, http/json", () => {
  it("when spans are sent as JSON, then they follow OTLP's JSON mapping (hex ids, 64-bit integers as strings)", async () => {
    const sink = exporter({ protocol: "http/json" });
    const { server } = endTwoSpans(sink);
    await sink.flush();
    const [got] = received;
    expect(got?.headers["content-type"]).toBe("application/json");
    const body = JSON.parse(String(got?.body));
    const spans = body.resourceSpans[0].scopeSpans[0].spans;
    expect(body.resourceSpans[0].resource.attributes[0]).toEqual({
      key: "service.name",
      value: { stringValue: "botdir-test" },
    });
    expect(spans[1]).toMatchObject({
      traceId: PARENT.traceId,
      spanId: server.spanContext().spanId,
      parentSpanId: PARENT.spanId,
      name: "GET /api/v1/bots/:id/check",
      kind: 2,
      flags: 0x301,
    });
    expect(spans[1].startTimeUnixNano).toMatch(/^\d{19}$/);
    expect(spans[1].attributes).toContainEqual({ key: "botdir.attempt", value: { intValue: "3" } });
    expect(spans[0].status).toEqual({ code: 2 });
  });
});

describe("RecordedSpan", () => {
  it("when spans start with one shared attributes object, then an attribute set on one is not set on the object or the others", async () => {
    const sink = exporter({ protocol: "http/json" });
    const shared = Object.freeze({ "db.system.name": "postgresql" });
    const start = () =>
      new RecordedSpan(
        sink,
        { traceId: newTraceId(), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED },
        undefined,
        "pg.check",
        SpanKind.CLIENT,
        shared,
        undefined,
        undefined,
      );
    const [a, b] = [start(), start()];
    a.setAttribute("botdir.batch", 3);
    a.end();
    b.end();
    expect(shared).toEqual({ "db.system.name": "postgresql" });
    await sink.flush();
    const spans = JSON.parse(String(received[0]?.body)).resourceSpans[0].scopeSpans[0].spans;
    expect(spans[0].attributes).toHaveLength(2);
    expect(spans[1].attributes).toEqual([{ key: "db.system.name", value: { stringValue: "postgresql" } }]);
  });
});

describe("ProtoWriter", () => {
  it("writes epoch nanoseconds exactly from epoch milliseconds with a fraction, without BigInt", () => {
    const cases = [
      0,
      1,
      1.5,
      1.999_999_7, // the fraction rounds up to a whole millisecond
      4294.967296,
      1_764_331_200_000.123,
      1_999_999_999_999.999,
      Date.now() + 0.000_7,
    ];
    for (let i = 0; i < 1_000; i++) cases.push(1_700_000_000_000 + Math.random() * 1e11);
    for (const ms of cases) {
      const w = new ProtoWriter(16);
      w.epochNanos(7, ms);
      expect(w.bytes()[0]).toBe((7 << 3) | 1);
      expect(w.bytes().readBigUInt64LE(1)).toBe(exactNanos(ms));
    }
  });

  it("when one span is sent as protobuf and as JSON, then both carry the same nanoseconds, exact", async () => {
    const times: [number, number][] = [
      [1_764_331_200_000 + 0.123_456, 1_764_331_200_001 + 0.999_9],
      [1_999_999_999_999 + 0.000_1, 1_999_999_999_999 + 0.5],
    ];
    for (let i = 0; i < 50; i++) {
      const start = 1_700_000_000_000 + Math.random() * 1e11;
      times.push([start, start + Math.random() * 10]);
    }
    const send = async (protocol: "http/protobuf" | "http/json", start: number, end: number) => {
      const sink = exporter({ protocol });
      const span = new RecordedSpan(
        sink,
        { traceId: newTraceId(), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED },
        undefined,
        "t",
        SpanKind.INTERNAL,
        undefined,
        undefined,
        start,
      );
      span.end(end);
      received.length = 0;
      await sink.flush();
      const body = received[0]?.body as Buffer;
      // biome-ignore lint/suspicious/noExplicitAny: a decoded message, its two times read below
      const message: any =
        protocol === "http/json"
          ? JSON.parse(String(body))
          : OTLP.toObject(OTLP.decode(body), { longs: String });
      const s = message.resourceSpans[0].scopeSpans[0].spans[0];
      return [String(s.startTimeUnixNano), String(s.endTimeUnixNano)];
    };
    for (const [start, end] of times) {
      const expected = [start, end].map((ms) => String(exactNanos(ms)));
      expect(await send("http/json", start, end)).toEqual(expected);
      expect(await send("http/protobuf", start, end)).toEqual(expected);
    }
  });

  it("writes ids as their bytes, lowercase or uppercase hex", () => {
    const traces = [newTraceId(), newTraceId(), newTraceId().toUpperCase()];
    const spans = [newSpanId(), newSpanId(), newSpanId(), newSpanId().toUpperCase()];
    const w = new ProtoWriter(16);
    const expected: Buffer[] = [];
    for (let i = 0; i < 2_000; i++) {
      const hex =
        i % 3 === 0
          ? (traces[Math.floor(Math.random() * traces.length)] as string)
          : (spans[Math.floor(Math.random() * spans.length)] as string);
      w.hexBytes(1, hex);
      const bytes = Buffer.from(hex, "hex");
      expected.push(Buffer.from([(1 << 3) | 2, bytes.length]), bytes);
    }
    expect(w.bytes().equals(Buffer.concat(expected))).toBe(true);
  });

  it("writes a kept string (names, keys) as string writes it, the first time and every time after", () => {
    const values = ["http.request.method", "GET /api/v1/bots/:id/check", "", "ünïcode", "k".repeat(200)];
    const kept = new ProtoWriter(16);
    const plain = new ProtoWriter(16);
    for (let i = 0; i < 3; i++) {
      for (const [field, value] of values.entries()) {
        kept.keptString(field + 1, value);
        plain.string(field + 1, value);
      }
    }
    expect(kept.bytes().equals(plain.bytes())).toBe(true);
  });

  it("writes a length of 128 bytes or more as a longer varint, the bytes after it intact", () => {
    const w = new ProtoWriter(8);
    const at = w.begin(2);
    const long = "x".repeat(300);
    w.string(1, long);
    w.end(at);
    const Message = protobuf
      .parse('syntax = "proto3"; message Outer { Inner inner = 2; } message Inner { string s = 1; }')
      .root.lookupType("Outer");
    expect(Message.toObject(Message.decode(w.bytes()))).toEqual({ inner: { s: long } });
  });
});

describe("ids and the ratio sampler", () => {
  it("makes lowercase hex ids of the W3C sizes, all distinct", () => {
    const traces = new Set(Array.from({ length: 5_000 }, newTraceId));
    expect(traces.size).toBe(5_000);
    for (const id of traces) expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(newSpanId()).toMatch(/^[0-9a-f]{16}$/);
  });

  it("samples about the ratio of random traces, all at 1, none at 0, the same trace the same way every time", () => {
    const ids = Array.from({ length: 20_000 }, newTraceId);
    const tenth = ratioSampler(0.1);
    const share = ids.filter(tenth).length / ids.length;
    expect(share).toBeGreaterThan(0.08);
    expect(share).toBeLessThan(0.12);
    expect(ids.every(ratioSampler(1))).toBe(true);
    expect(ids.some(ratioSampler(0))).toBe(false);
    expect(ids.filter(tenth)).toEqual(ids.filter(ratioSampler(0.1)));
  });

  it("decides as the SDK's TraceIdRatioBased algorithm (parseInt of each 8-character word) for ids in either case", () => {
    // The OpenTelemetry SDK's accumulation, as sdk-trace-base's TraceIdRatioBasedSampler does it.
    const sdk = (ratio: number) => {
      const upper = Math.floor(ratio * 0xffffffff);
      return (traceId: string) => {
        let acc = 0;
        for (let i = 0; i < traceId.length / 8; i++) {
          acc = (acc ^ Number.parseInt(traceId.slice(i * 8, (i + 1) * 8), 16)) >>> 0;
        }
        return acc < upper;
      };
    };
    const ids = [
      ...Array.from({ length: 20_000 }, newTraceId),
      ...Array.from({ length: 2_000 }, () => newTraceId().toUpperCase()),
      "ffffffffffffffffffffffffffffffff",
      "0000000000000000000000000000000f",
      "FFFFFFFF000000000000000000000000",
    ];
    for (const ratio of [0.001, 0.1, 0.5, 0.999]) {
      const ours = ratioSampler(ratio);
      const theirs = sdk(ratio);
      const differing = ids.filter((id) => ours(id) !== theirs(id));
      expect({ ratio, differing }).toEqual({ ratio, differing: [] });
    }
  });
});
