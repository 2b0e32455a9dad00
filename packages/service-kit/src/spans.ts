/**
 * The spans of the three apps and their OTLP/HTTP export (docs/tracing.md), without the
 * OpenTelemetry SDK: a recorded span is a plain record that implements the API's `Span`, written
 * when it ends straight into the export buffer (OTLP protobuf bytes, or a JSON-ready object for
 * `http/json`), and the buffer is sent once a second (or sooner when it is large) as one
 * ExportTraceServiceRequest, by a worker thread (SENDER_SOURCE). The SDK's span objects, span processor and exporter cost two thirds of
 * what tracing added to a request (docs/performance.md, "What tracing costs"); what the apps use of
 * them is this file: names, kinds, attributes (string, number, boolean and their arrays), links, an
 * error status, parents local or remote. Span events are not recorded (the apps add none).
 *
 * The sampler's decision is telemetry.ts's (`records`), taken before a span is made: a span that
 * is not recorded is never made here, only its ids (trace.wrapSpanContext).
 */
import { randomFillSync } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import type {
  Attributes,
  AttributeValue,
  Exception,
  Link,
  Span,
  SpanContext,
  SpanStatus,
  TimeInput,
} from "@opentelemetry/api";
import { SpanStatusCode } from "@opentelemetry/api";

// ---------------------------------------------------------------------------------------------
// Ids: random bytes drawn from the OS in blocks, as lowercase hex (the API's form).

const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
/** The pool's bytes as hex, drawn 4,096 bytes at a time; ids are slices of it. */
let hexPool = "";
let hexAt = 0;
const ZERO_IDS: Record<number, string> = { 16: "0".repeat(16), 32: "0".repeat(32) };

function randomHex(bytes: number): string {
  const chars = bytes * 2;
  for (;;) {
    if (hexAt + chars > hexPool.length) {
      randomFillSync(pool);
      hexPool = pool.toString("hex");
      hexAt = 0;
    }
    const id = hexPool.slice(hexAt, hexAt + chars);
    hexAt += chars;
    // All-zero ids are invalid (W3C): draw again (one in 2^64 at worst).
    if (id !== ZERO_IDS[chars]) return id;
  }
}

/** A new trace id: 32 lowercase hex characters, never all zero. */
export const newTraceId = (): string => randomHex(16);
/** A new span id: 16 lowercase hex characters, never all zero. */
export const newSpanId = (): string => randomHex(8);

/**
 * OpenTelemetry's TraceIdRatioBased decision for `traceId` (the SDK's algorithm, so that every
 * process, ours or another's, decides a trace the same way): the four 32-bit words of the id
 * XOR-ed, below ratio × 2^32 − 1.
 */
export function ratioSampler(ratio: number): (traceId: string) => boolean {
  const r = Number.isNaN(ratio) ? 0 : Math.min(1, Math.max(0, ratio));
  const upper = r === 1 ? 4294967296 : Math.floor(r * 4294967295);
  return (traceId) => {
    let acc = 0;
    for (let i = 0; i < 32; i += 8) acc = (acc ^ hexWord(traceId, i)) >>> 0;
    return acc < upper;
  };
}

/**
 * The 32-bit word of the 8 hex characters of `hex` at `at`, as `Number.parseInt(slice, 16)` reads
 * a valid id's (either case), a byte at a time (hexByte), without the slice and parseInt's runtime
 * call: four of those were ≈ 1,900 instructions of every request the sampler decides
 * (docs/performance.md).
 */
function hexWord(hex: string, at: number): number {
  let word = 0;
  for (let i = at; i < at + 8; i += 2) word = (word << 8) | hexByte(hex, i);
  return word >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Time: epoch nanoseconds from the monotonic clock (as the SDK takes its span times).

const ORIGIN_MS = performance.timeOrigin;

function nowMs(): number {
  return ORIGIN_MS + performance.now();
}

function timeInputMs(time: TimeInput | undefined): number {
  if (time === undefined) return nowMs();
  if (typeof time === "number") return time < ORIGIN_MS / 2 ? ORIGIN_MS + time : time; // performance.now() or epoch ms
  if (time instanceof Date) return time.getTime();
  return time[0] * 1e3 + time[1] / 1e6;
}

// ---------------------------------------------------------------------------------------------
// The recorded span.

const NO_ATTRIBUTES: Attributes = Object.freeze({}) as Attributes;

/** Where ended spans go (the exporter's buffer). */
export interface SpanSink {
  add(span: RecordedSpan): void;
}

/** A span the sampler records: a plain record behind the API's `Span` interface. */
export class RecordedSpan implements Span {
  readonly ids: SpanContext;
  readonly parentSpanId: string | undefined;
  readonly parentRemote: boolean;
  name: string;
  /** The API's SpanKind (OTLP's is one more). */
  readonly kind: number;
  readonly startMs: number;
  endMs = 0;
  /** The attributes given at start (not copied: the caller's object may be shared) and set since. */
  attributes: Attributes;
  /** Whether `attributes` is this span's own object yet (copied on the first write). */
  private ownAttributes = false;
  links: Link[] | undefined;
  statusCode: SpanStatusCode = SpanStatusCode.UNSET;
  statusMessage: string | undefined;
  private ended = false;

  constructor(
    private readonly sink: SpanSink,
    ids: SpanContext,
    parent: SpanContext | undefined,
    name: string,
    kind: number,
    attributes: Attributes | undefined,
    links: Link[] | undefined,
    startTime: TimeInput | undefined,
  ) {
    this.ids = ids;
    this.parentSpanId = parent?.spanId;
    this.parentRemote = parent?.isRemote === true;
    this.name = name;
    this.kind = kind;
    this.attributes = attributes ?? NO_ATTRIBUTES;
    this.links = links && links.length > 0 ? links.slice() : undefined;
    this.startMs = startTime === undefined ? nowMs() : timeInputMs(startTime);
  }

  spanContext(): SpanContext {
    return this.ids;
  }

  private writable(): Attributes {
    if (!this.ownAttributes) {
      this.attributes = { ...this.attributes };
      this.ownAttributes = true;
    }
    return this.attributes;
  }

  setAttribute(key: string, value: AttributeValue): this {
    if (!this.ended && value !== undefined && value !== null) this.writable()[key] = value;
    return this;
  }

  setAttributes(attributes: Attributes): this {
    if (!this.ended) {
      for (const key of Object.keys(attributes)) {
        const value = attributes[key];
        if (value !== undefined && value !== null) this.writable()[key] = value;
      }
    }
    return this;
  }

  /** Span events are not recorded (see the file's comment). */
  addEvent(): this {
    return this;
  }

  addLink(link: Link): this {
    if (this.ended) return this;
    if (this.links) this.links.push(link);
    else this.links = [link];
    return this;
  }

  addLinks(links: Link[]): this {
    for (const link of links) this.addLink(link);
    return this;
  }

  setStatus(status: SpanStatus): this {
    if (this.ended || status.code === SpanStatusCode.UNSET) return this;
    // An OK status is final; an error's message only where one is given.
    if (this.statusCode === SpanStatusCode.OK) return this;
    this.statusCode = status.code;
    this.statusMessage = status.code === SpanStatusCode.ERROR ? status.message : undefined;
    return this;
  }

  updateName(name: string): this {
    if (!this.ended) this.name = name;
    return this;
  }

  end(endTime?: TimeInput): void {
    if (this.ended) return;
    this.ended = true;
    this.endMs = endTime === undefined ? nowMs() : Math.max(this.startMs, timeInputMs(endTime));
    this.sink.add(this);
  }

  isRecording(): boolean {
    return !this.ended;
  }

  /** Marks the span failed with the exception's name (never its message, which may hold data). */
  recordException(exception: Exception): void {
    const type = typeof exception === "string" ? "error" : (exception as { name?: string }).name || "error";
    this.setAttribute("error.type", type);
  }
}

// ---------------------------------------------------------------------------------------------
// OTLP protobuf (opentelemetry/proto/trace/v1/trace.proto, common/v1/common.proto), written by
// hand: tags are (field << 3) | wire type; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.

/** Two hex digits (their char codes, 7 bits each: `first << 7 | second`) → the byte they spell. */
const HEX_PAIR = new Uint8Array(1 << 14);
{
  const digits: [number, number][] = [];
  for (let i = 0; i < 10; i++) digits.push([48 + i, i]);
  for (let i = 0; i < 6; i++) digits.push([97 + i, 10 + i], [65 + i, 10 + i]);
  for (const [high, h] of digits) for (const [low, l] of digits) HEX_PAIR[(high << 7) | low] = h * 16 + l;
}

/** The byte spelled by the two hex digits of `hex` at `i` (HEX_PAIR). */
function hexByte(hex: string, i: number): number {
  return HEX_PAIR[((hex.charCodeAt(i) & 0x7f) << 7) | (hex.charCodeAt(i + 1) & 0x7f)] as number;
}

/** Strings whose bytes a writer keeps (span names, attribute keys: a few dozen in an app). */
const MAX_KEPT_STRINGS = 512;
const TWO_32 = 4294967296;

/**
 * A growable byte buffer with the few protobuf writes the spans need. Written for a span's size
 * (a few hundred bytes, short ASCII strings): bytes set one by one, no native call per field.
 */
export class ProtoWriter {
  buf: Buffer;
  pos = 0;
  /** keptString's strings: each one's field bytes after the tag (length and UTF-8). */
  private readonly kept = new Map<string, Uint8Array>();

  constructor(size = 64 * 1024) {
    this.buf = Buffer.allocUnsafe(size);
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  varint(value: number): void {
    this.room(10);
    let v = value;
    while (v > 0x7f) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  /** A string field (length-delimited UTF-8); ASCII up to 127 characters written byte by byte. */
  string(field: number, value: string): void {
    const n = value.length;
    if (n < 128) {
      const start = this.pos;
      this.tag(field, 2);
      this.room(n + 1);
      const buf = this.buf;
      let at = this.pos;
      buf[at++] = n;
      let i = 0;
      for (; i < n; i++) {
        const c = value.charCodeAt(i);
        if (c > 0x7f) break;
        buf[at++] = c;
      }
      if (i === n) {
        this.pos = at;
        return;
      }
      this.pos = start; // not ASCII: written again below
    }
    const length = Buffer.byteLength(value);
    this.tag(field, 2);
    this.varint(length);
    this.room(length);
    this.pos += this.buf.write(value, this.pos, length, "utf8");
  }

  /**
   * A string field whose bytes the writer keeps after their first write (span names, attribute
   * keys: written on every span, the same few dozen strings). Past MAX_KEPT_STRINGS, written as `string`.
   */
  keptString(field: number, value: string): void {
    const bytes = this.kept.get(value);
    if (bytes === undefined) {
      const start = this.pos;
      this.string(field, value);
      if (this.kept.size < MAX_KEPT_STRINGS) {
        const tagSize = varintSize((field << 3) | 2);
        this.kept.set(value, Uint8Array.prototype.slice.call(this.buf, start + tagSize, this.pos));
      }
      return;
    }
    this.tag(field, 2);
    const n = bytes.length;
    this.room(n);
    // Byte by byte: a few dozen bytes, shorter than a native copy's call.
    const buf = this.buf;
    let at = this.pos;
    for (let i = 0; i < n; i++) buf[at++] = bytes[i] as number;
    this.pos = at;
  }

  /** A bytes field from hex (ids), two digits at a time. */
  hexBytes(field: number, hex: string): void {
    const length = hex.length >>> 1;
    this.tag(field, 2);
    this.varint(length);
    this.room(length);
    const buf = this.buf;
    let at = this.pos;
    for (let i = 0; i < hex.length; i += 2) buf[at++] = hexByte(hex, i);
    this.pos = at;
  }

  private uint32LE(value: number): void {
    const buf = this.buf;
    buf[this.pos++] = value & 0xff;
    buf[this.pos++] = (value >>> 8) & 0xff;
    buf[this.pos++] = (value >>> 16) & 0xff;
    buf[this.pos++] = (value >>> 24) & 0xff;
  }

  /** A fixed64 of epoch nanoseconds from epoch milliseconds (epochNanoParts: exact, without BigInt). */
  epochNanos(field: number, ms: number): void {
    this.tag(field, 1);
    this.room(8);
    const [whole, fractionNs] = epochNanoParts(ms);
    const high = Math.floor(whole / 2097152); // whole = high × 2^21 + low
    const low = whole - high * 2097152;
    const upper = high * 1e6; // × 2^21 below
    const lower = low * 1e6 + fractionNs; // < 2^42
    // upper × 2^21 = (upper mod 2^11) × 2^21 + floor(upper / 2^11) × 2^32
    const upperHigh = Math.floor(upper / 2048);
    let lo = (upper - upperHigh * 2048) * 2097152 + (lower % TWO_32);
    let hi = upperHigh + Math.floor(lower / TWO_32);
    if (lo >= TWO_32) {
      hi += Math.floor(lo / TWO_32);
      lo %= TWO_32;
    }
    this.uint32LE(lo);
    this.uint32LE(hi);
  }

  double(field: number, value: number): void {
    this.tag(field, 1);
    this.room(8);
    this.buf.writeDoubleLE(value, this.pos);
    this.pos += 8;
  }

  fixed32(field: number, value: number): void {
    this.tag(field, 5);
    this.room(4);
    this.uint32LE(value >>> 0);
  }

  /** An int64 varint (negative numbers as ten bytes of two's complement). */
  int64(field: number, value: number): void {
    this.tag(field, 0);
    if (value >= 0) {
      this.varint(value);
      return;
    }
    let v = BigInt.asUintN(64, BigInt(value));
    this.room(10);
    while (v > 0x7fn) {
      this.buf[this.pos++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.buf[this.pos++] = Number(v);
  }

  /**
   * Starts a length-delimited field: its tag and one byte kept for the length (most of a span's
   * messages are shorter than 128 bytes). Returns where the length goes, for `end`.
   */
  begin(field: number): number {
    this.tag(field, 2);
    this.room(1);
    return this.pos++;
  }

  /** Ends the field `begin` started: its length written, the bytes moved right when it needs more than one. */
  end(lengthAt: number): void {
    const length = this.pos - lengthAt - 1;
    if (length < 128) {
      this.buf[lengthAt] = length;
      return;
    }
    const size = varintSize(length);
    this.room(size - 1);
    this.buf.copy(this.buf, lengthAt + size, lengthAt + 1, this.pos);
    let v = length;
    let at = lengthAt;
    while (v > 0x7f) {
      this.buf[at++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[at] = v;
    this.pos += size - 1;
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}

function varintSize(value: number): number {
  let size = 1;
  let v = value;
  while (v > 0x7f) {
    size++;
    v = Math.floor(v / 128);
  }
  return size;
}

/** AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4, array_value 5. */
function writeAnyValue(w: ProtoWriter, value: AttributeValue): void {
  if (typeof value === "string") w.string(1, value);
  else if (typeof value === "boolean") {
    w.tag(2, 0);
    w.varint(value ? 1 : 0);
  } else if (typeof value === "number") {
    if (Number.isSafeInteger(value)) w.int64(3, value);
    else w.double(4, value);
  } else if (Array.isArray(value)) {
    // ArrayValue { repeated AnyValue values = 1 }
    const array = w.begin(5);
    for (const item of value) {
      if (item === null || item === undefined) continue;
      const any = w.begin(1);
      writeAnyValue(w, item);
      w.end(any);
    }
    w.end(array);
  }
}

/** repeated KeyValue at `field`: KeyValue { key 1, value 2 }. */
function writeAttributes(w: ProtoWriter, field: number, attributes: Attributes): void {
  for (const key in attributes) {
    const value = attributes[key];
    if (value === undefined || value === null) continue;
    const keyValue = w.begin(field);
    w.keptString(1, key);
    const any = w.begin(2);
    writeAnyValue(w, value);
    w.end(any);
    w.end(keyValue);
  }
}

const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

/**
 * Epoch milliseconds (a fraction: sub-millisecond) as whole milliseconds and the nanoseconds past
 * them (0–999,999): ns = whole × 10⁶ + fraction, exact, for the protobuf writer's fixed64 and
 * OTLP JSON's decimal string alike.
 */
function epochNanoParts(ms: number): [number, number] {
  let whole = Math.floor(ms);
  let fractionNs = Math.round((ms - whole) * 1e6);
  if (fractionNs === 1e6) {
    whole += 1;
    fractionNs = 0;
  }
  return [whole, fractionNs];
}

/** Epoch nanoseconds as OTLP JSON's decimal string (epochNanoParts; epoch milliseconds are > 0). */
function epochNanosText(ms: number): string {
  const [whole, fractionNs] = epochNanoParts(ms);
  return whole === 0 ? String(fractionNs) : `${whole}${String(fractionNs).padStart(6, "0")}`;
}

/** One Span message (scope_spans' field 2), tag included. */
export function writeSpan(w: ProtoWriter, span: RecordedSpan): void {
  const message = w.begin(2);
  w.hexBytes(1, span.ids.traceId);
  w.hexBytes(2, span.ids.spanId);
  if (span.parentSpanId) w.hexBytes(4, span.parentSpanId);
  w.keptString(5, span.name);
  w.tag(6, 0);
  w.varint(span.kind + 1);
  w.epochNanos(7, span.startMs);
  w.epochNanos(8, span.endMs);
  writeAttributes(w, 9, span.attributes);
  if (span.links) {
    for (const link of span.links) {
      // Link { trace_id 1, span_id 2, attributes 4, flags 6 }
      const at = w.begin(13);
      w.hexBytes(1, link.context.traceId);
      w.hexBytes(2, link.context.spanId);
      if (link.attributes) writeAttributes(w, 4, link.attributes);
      w.fixed32(
        6,
        (link.context.traceFlags & 0xff) | HAS_IS_REMOTE | (link.context.isRemote ? IS_REMOTE : 0),
      );
      w.end(at);
    }
  }
  if (span.statusCode !== SpanStatusCode.UNSET) {
    // Status { message 2, code 3 }
    const status = w.begin(15);
    if (span.statusMessage) w.string(2, span.statusMessage);
    w.tag(3, 0);
    w.varint(span.statusCode);
    w.end(status);
  }
  w.fixed32(16, (span.ids.traceFlags & 0xff) | HAS_IS_REMOTE | (span.parentRemote ? IS_REMOTE : 0));
  w.end(message);
}

// ---------------------------------------------------------------------------------------------
// OTLP JSON (the protobuf's JSON mapping: ids in hex, 64-bit integers as strings, enums as numbers).

type JsonValue =
  | { stringValue: string }
  | { boolValue: boolean }
  | { intValue: string }
  | { doubleValue: number }
  | { arrayValue: { values: JsonValue[] } };

function jsonValue(value: AttributeValue): JsonValue {
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  if (typeof value === "number") {
    return Number.isSafeInteger(value) ? { intValue: String(value) } : { doubleValue: value };
  }
  return {
    arrayValue: {
      values: (value as unknown[])
        .filter((v) => v !== null && v !== undefined)
        .map((v) => jsonValue(v as AttributeValue)),
    },
  };
}

function jsonAttributes(attributes: Attributes): { key: string; value: JsonValue }[] {
  const out: { key: string; value: JsonValue }[] = [];
  for (const key of Object.keys(attributes)) {
    const value = attributes[key];
    if (value !== undefined && value !== null) out.push({ key, value: jsonValue(value) });
  }
  return out;
}

/** A span in OTLP JSON. */
export function jsonSpan(span: RecordedSpan): Record<string, unknown> {
  return {
    traceId: span.ids.traceId,
    spanId: span.ids.spanId,
    ...(span.parentSpanId ? { parentSpanId: span.parentSpanId } : {}),
    name: span.name,
    kind: span.kind + 1,
    startTimeUnixNano: epochNanosText(span.startMs),
    endTimeUnixNano: epochNanosText(span.endMs),
    attributes: jsonAttributes(span.attributes),
    ...(span.links
      ? {
          links: span.links.map((l) => ({
            traceId: l.context.traceId,
            spanId: l.context.spanId,
            ...(l.attributes ? { attributes: jsonAttributes(l.attributes) } : {}),
            flags: (l.context.traceFlags & 0xff) | HAS_IS_REMOTE | (l.context.isRemote ? IS_REMOTE : 0),
          })),
        }
      : {}),
    ...(span.statusCode !== SpanStatusCode.UNSET
      ? {
          status: {
            code: span.statusCode,
            ...(span.statusMessage ? { message: span.statusMessage } : {}),
          },
        }
      : {}),
    flags: (span.ids.traceFlags & 0xff) | HAS_IS_REMOTE | (span.parentRemote ? IS_REMOTE : 0),
  };
}

// ---------------------------------------------------------------------------------------------
// The exporter: a buffer of ended spans, sent as one request a second.

export interface ExporterOptions {
  /** `<endpoint>/v1/traces`. */
  url: string;
  protocol: "http/protobuf" | "http/json";
  gzip: boolean;
  headers: Record<string, string>;
  /** The resource's attributes (service.name and OTEL_RESOURCE_ATTRIBUTES among them). */
  resource: Attributes;
  /** The instrumentation scope's name. */
  scope: string;
  /** How often the buffer is sent (ms). Default 1,000. */
  intervalMs?: number;
  /** Sent at once past this many buffered bytes (protobuf) or spans ×200 (JSON). Default 512 KiB. */
  flushBytes?: number;
  /** Spans ended while this many bytes wait to be sent are dropped (counted). Default 8 MiB. */
  maxBufferedBytes?: number;
  /** One export's deadline (OTEL_EXPORTER_OTLP_TIMEOUT's default, 10 s). */
  timeoutMs?: number;
  /**
   * Whether exports are sent by a worker thread (default true: a server's HTTP code stays optimised
   * for its own requests). A short-lived command sends its one export itself, sooner than a thread
   * starts.
   */
  exportThread?: boolean;
  /** Told when an export fails or spans are dropped (never with headers or bodies). */
  onProblem?: (what: { kind: "export_failed" | "spans_dropped"; detail: string; count: number }) => void;
}

/** A rough size of a JSON span, to bound the JSON buffer as the protobuf one is bounded. */
const JSON_SPAN_BYTES = 400;

export class OtlpSpanExporter implements SpanSink {
  private writer = new ProtoWriter();
  private spans = 0;
  private json: Record<string, unknown>[] = [];
  private waiting: Buffer[] = [];
  private waitingBytes = 0;
  private sending: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private soon: NodeJS.Immediate | undefined;
  /** The thread that sends the exports (SENDER_SOURCE), started with the exporter (again at an export after it stopped). */
  private worker: Worker | undefined;
  /** MAKE_SENDER's sender on this thread (exportThread false), made at the first export. */
  private here: ReturnType<MakeSender> | undefined;
  private readonly answers = new Map<number, (error: string | undefined) => void>();
  private nextExport = 0;
  private readonly prefix: { resource: Buffer; scope: Buffer };
  private stopped = false;
  /** Spans ended and not sent because the buffer was full, and exports that failed (for tests). */
  readonly counts = { exported: 0, dropped: 0, failedExports: 0 };

  constructor(private readonly options: ExporterOptions) {
    const resource = new ProtoWriter(1024);
    const resourceAt = resource.begin(1);
    writeAttributes(resource, 1, options.resource);
    resource.end(resourceAt);
    const scope = new ProtoWriter(256);
    const scopeAt = scope.begin(1);
    scope.string(1, options.scope);
    scope.end(scopeAt);
    this.prefix = { resource: Buffer.from(resource.bytes()), scope: Buffer.from(scope.bytes()) };
    this.timer = setInterval(() => this.flush(), options.intervalMs ?? 1_000);
    this.timer.unref();
    // The export thread starts with the exporter, not with its first export: Node's worker code
    // and the thread's start are paid once as the app starts, not by the requests of that moment.
    if (options.exportThread !== false) this.sender();
  }

  private get maxBytes(): number {
    return this.options.maxBufferedBytes ?? 8 * 1024 * 1024;
  }

  private bufferedBytes(): number {
    return this.options.protocol === "http/json"
      ? this.json.length * JSON_SPAN_BYTES + this.waitingBytes
      : this.writer.pos + this.waitingBytes;
  }

  add(span: RecordedSpan): void {
    if (this.stopped) return;
    if (this.bufferedBytes() >= this.maxBytes) {
      this.counts.dropped++;
      if (this.counts.dropped === 1 || this.counts.dropped % 10_000 === 0) {
        this.options.onProblem?.({
          kind: "spans_dropped",
          detail: "the export buffer is full (the collector is slow or unreachable)",
          count: this.counts.dropped,
        });
      }
      return;
    }
    if (this.options.protocol === "http/json") this.json.push(jsonSpan(span));
    else writeSpan(this.writer, span);
    this.spans++;
    if (this.bufferedBytes() - this.waitingBytes >= (this.options.flushBytes ?? 512 * 1024) && !this.soon) {
      this.soon = setImmediate(() => {
        this.soon = undefined;
        this.flush();
      });
    }
  }

  /** The ExportTraceServiceRequest of the spans buffered so far (and empties the buffer). */
  private take(): Buffer | undefined {
    if (this.spans === 0) return undefined;
    this.spans = 0;
    if (this.options.protocol === "http/json") {
      const spans = this.json;
      this.json = [];
      return Buffer.from(
        JSON.stringify({
          resourceSpans: [
            {
              resource: { attributes: jsonAttributes(this.options.resource) },
              scopeSpans: [{ scope: { name: this.options.scope }, spans }],
            },
          ],
        }),
      );
    }
    const spanBytes = this.writer.bytes();
    // ScopeSpans { scope 1, spans 2 } inside ResourceSpans { resource 1, scope_spans 2 } inside
    // ExportTraceServiceRequest { resource_spans 1 }.
    const scopeSpansLength = this.prefix.scope.length + spanBytes.length;
    const scopeHeader = lengthHeader(2, scopeSpansLength);
    const resourceSpansLength = this.prefix.resource.length + scopeHeader.length + scopeSpansLength;
    const body = Buffer.concat([
      lengthHeader(1, resourceSpansLength),
      this.prefix.resource,
      scopeHeader,
      this.prefix.scope,
      spanBytes,
    ]);
    // The writer's buffer is reused for the next spans (its bytes were copied above).
    this.writer.pos = 0;
    if (this.writer.buf.length > 4 * 1024 * 1024) this.writer = new ProtoWriter();
    return body;
  }

  /** Sends what is buffered (one request at a time; what ends meanwhile waits for the next). */
  flush(): Promise<void> {
    const body = this.take();
    if (body) {
      this.waiting.push(body);
      this.waitingBytes += body.length;
    }
    if (!this.sending && this.waiting.length > 0) {
      this.sending = this.sendWaiting().finally(() => {
        this.sending = undefined;
      });
    }
    return this.sending ?? Promise.resolve();
  }

  private async sendWaiting(): Promise<void> {
    while (this.waiting.length > 0) {
      const body = this.waiting.shift() as Buffer;
      this.waitingBytes -= body.length;
      try {
        await this.post(body);
      } catch (error) {
        this.counts.failedExports++;
        this.options.onProblem?.({
          kind: "export_failed",
          detail: (error as Error).message,
          count: this.counts.failedExports,
        });
      }
    }
  }

  /** The sending thread, started (or started again after it stopped) when an export needs it. */
  private sender(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(SENDER_SOURCE, {
      eval: true,
      workerData: this.senderConfig(),
      resourceLimits: { maxOldGenerationSizeMb: 64 },
    });
    // Only an export in flight keeps the process alive (post refs it, the last answer unrefs).
    worker.unref();
    worker.on("message", (answer: { id: number; error?: string }) => {
      const settle = this.answers.get(answer.id);
      this.answers.delete(answer.id);
      if (this.answers.size === 0) worker.unref();
      settle?.(answer.error);
    });
    const stopped = (why: string) => {
      if (this.worker === worker) this.worker = undefined;
      for (const settle of this.answers.values()) settle(why);
      this.answers.clear();
    };
    worker.on("error", (error) => stopped(`the export thread failed: ${error.message}`));
    worker.on("exit", () => stopped("the export thread stopped"));
    this.worker = worker;
    return worker;
  }

  /**
   * One export request, sent by the export thread: the HTTP client's objects (a request, its
   * response, their streams) never pass through this thread's HTTP code, which V8 optimises for the
   * server's requests alone (an export on this thread deoptimised it: docs/performance.md).
   */
  private post(raw: Buffer): Promise<void> {
    if (this.options.exportThread === false) return this.postHere(raw);
    const worker = this.sender();
    const id = this.nextExport++;
    // Exactly the body's bytes: a clone of a view takes its whole ArrayBuffer (raw may be a slice
    // of Node's shared Buffer pool, with other data in it).
    const body = new Uint8Array(raw);
    return new Promise<void>((resolve, reject) => {
      this.answers.set(id, (error) => {
        if (error === undefined) {
          this.counts.exported++;
          resolve();
        } else reject(new Error(error));
      });
      worker.ref();
      // Copied to the thread (structured clone), never transferred: detaching an ArrayBuffer
      // invalidates V8's ArrayBufferDetaching protector for the whole process, which deoptimises
      // every function that reads a Buffer or typed array (Node's nextTick and timers, the
      // PostgreSQL and Redis parsers: 94 functions in the dispatcher) and adds a detach check to
      // each such read from then on (docs/performance.md).
      worker.postMessage({ id, body });
    });
  }

  /** MAKE_SENDER's settings: where, with which headers, compressed or not, within what time. */
  private senderConfig(): SenderConfig {
    return {
      url: this.options.url,
      headers: this.options.headers,
      json: this.options.protocol === "http/json",
      gzip: this.options.gzip,
      timeoutMs: this.options.timeoutMs ?? 10_000,
    };
  }

  /** One export request sent from this thread (exportThread false), by the export thread's code. */
  private async postHere(raw: Buffer): Promise<void> {
    this.here ??= (new Function(`return ${MAKE_SENDER}`)() as MakeSender)(this.senderConfig());
    const error = await this.here.send(raw);
    if (error !== undefined) throw new Error(error);
    this.counts.exported++;
  }

  /** Sends what is buffered and stops (the apps' last shutdown step). */
  async shutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.soon) clearImmediate(this.soon);
    await this.flush();
    await this.sending;
    this.stopped = true;
    this.here?.close();
    await this.worker?.terminate();
  }
}

interface SenderConfig {
  url: string;
  headers: Record<string, string>;
  /** OTLP JSON (else protobuf). */
  json: boolean;
  gzip: boolean;
  timeoutMs: number;
}
type MakeSender = (config: SenderConfig) => {
  send(body: Uint8Array): Promise<string | undefined>;
  close(): void;
};

/**
 * The export's sender, as source (it runs in the export thread, and on this thread for a
 * command): POSTs each body to the collector (gzip-compressed where asked) over a keep-alive
 * connection, and resolves with nothing or the failure's one sentence. Plain JavaScript that reaches
 * Node's modules through process.getBuiltinModule, so it runs wherever it is evaluated.
 */
const MAKE_SENDER = `(config) => {
  const http = process.getBuiltinModule("node:http");
  const https = process.getBuiltinModule("node:https");
  const zlib = process.getBuiltinModule("node:zlib");
  const target = new URL(config.url);
  const secure = target.protocol === "https:";
  const agent = new (secure ? https : http).Agent({ keepAlive: true, maxSockets: 2 });
  const request = secure ? https.request : http.request;
  const headers = {
    ...config.headers,
    "content-type": config.json ? "application/json" : "application/x-protobuf",
    ...(config.gzip ? { "content-encoding": "gzip" } : {}),
  };
  const send = (body) =>
    new Promise((resolve) => {
      let answered = false;
      const answer = (error) => {
        if (answered) return;
        answered = true;
        resolve(error);
      };
      try {
        const raw = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
        const payload = config.gzip ? zlib.gzipSync(raw) : raw;
        const req = request(
          target,
          { method: "POST", headers: { ...headers, "content-length": payload.length }, agent, timeout: config.timeoutMs },
          (res) => {
            res.resume();
            res.on("end", () => {
              const status = res.statusCode || 0;
              answer(status >= 200 && status < 300 ? undefined : "the collector answered " + status);
            });
            res.on("error", (error) => answer(error.message));
          },
        );
        req.on("timeout", () => req.destroy(new Error("the export timed out")));
        req.on("error", (error) => answer(error.message));
        req.end(payload);
      } catch (error) {
        answer(error.message);
      }
    });
  return { send, close: () => agent.destroy() };
}`;

/** The export thread: MAKE_SENDER's sender, answering each body's id with nothing or the failure. */
const SENDER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { send } = (${MAKE_SENDER})(workerData);
parentPort.on("message", async ({ id, body }) => {
  const error = await send(body);
  parentPort.postMessage(error === undefined ? { id } : { id, error });
});
`;

function lengthHeader(field: number, length: number): Buffer {
  const w = new ProtoWriter(16);
  w.tag(field, 2);
  w.varint(length);
  return Buffer.from(w.bytes());
}
