/**
 * Hostile-input support: an app served in-process on a real loopback socket, a keep-alive client
 * that sends exactly the bytes it is given, fast-check arbitraries for requests, and the check
 * every answer must pass (a status the spec lists, the JSON error body, never a 5xx).
 */

import type { RequestListener } from "node:http";
import { Agent, createServer, type IncomingHttpHeaders, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "@botdir/service-kit";
import fc from "fast-check";
import { startStores, type TestStores } from "./stack.js";

/** Fixed seed (override with FUZZ_SEED to explore, print it to reproduce); runs per endpoint. */
export const FUZZ_SEED = Number(process.env.FUZZ_SEED ?? 20261121);
export const FUZZ_RUNS = Number(process.env.FUZZ_RUNS ?? 2500);

export interface Served {
  base: string;
  port: number;
  close(): Promise<void>;
}

export async function serve(app: RequestListener): Promise<Served> {
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface RawRequest {
  method: string;
  /** Path and query exactly as sent (already encoded by the generator). */
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** Send the body chunked instead of with a Content-Length. */
  chunked?: boolean;
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

const agent = new Agent({ keepAlive: true, maxSockets: 4 });

/**
 * Sends one request on a keep-alive connection. A server may close a kept-alive connection after
 * answering a request whose body it did not read (a 401 before the body, a 413); a request that
 * then fails on that reused socket before any answer is retried once, as Node's documentation
 * advises for keep-alive clients.
 */
export async function send(port: number, req: RawRequest, timeoutMs = 5_000): Promise<RawResponse> {
  try {
    return await sendOnce(port, req, timeoutMs);
  } catch (error) {
    if ((error as { reusedSocket?: boolean }).reusedSocket) return sendOnce(port, req, timeoutMs);
    throw error;
  }
}

function sendOnce(port: number, req: RawRequest, timeoutMs: number): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...req.headers };
    // Explicit framing: Node would send a GET body without Content-Length or chunking, which is
    // not HTTP (the bytes would be read as the next request).
    if (req.body && req.chunked) headers["transfer-encoding"] = "chunked";
    else if (req.body) headers["content-length"] = String(req.body.length);
    const r = request(
      { host: "127.0.0.1", port, method: req.method, path: req.path, headers, agent, timeout: timeoutMs },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on("error", reject);
      },
    );
    r.on("timeout", () =>
      r.destroy(new Error(`no answer within ${timeoutMs} ms: ${req.method} ${req.path}`)),
    );
    r.on("error", (error: Error) => {
      const code = (error as { code?: string }).code;
      const retryable = r.reusedSocket && (code === "ECONNRESET" || error.message === "socket hang up");
      reject(Object.assign(error, { reusedSocket: retryable }));
    });
    r.end(req.body);
  });
}

export function destroyAgent(): void {
  agent.destroy();
}

const ERROR_KEYS = new Set(["error", "retryAfter", "nextVoteAt"]);

function describe(req: RawRequest, res: RawResponse): string {
  const shown = { ...req, body: req.body?.subarray(0, 300).toString("latin1") };
  return `${JSON.stringify(shown)} -> ${res.status} ${res.body.subarray(0, 300).toString()}`;
}

/**
 * The contract every answer keeps: a listed status, never 5xx; an error is
 * `Content-Type: application/json` with `{"error": "<one sentence>"}` (plus retryAfter on 429).
 */
export function checkAnswer(req: RawRequest, res: RawResponse, allowed: readonly number[]): void {
  if (res.status >= 500 || !allowed.includes(res.status)) {
    throw new Error(`status ${res.status} is not one of ${allowed.join(",")}: ${describe(req, res)}`);
  }
  if (res.status < 400 || req.method === "HEAD") return;
  if (!/^application\/json/.test(String(res.headers["content-type"]))) {
    throw new Error(`error without a JSON content type: ${describe(req, res)}`);
  }
  let body: unknown;
  try {
    body = JSON.parse(res.body.toString("utf8"));
  } catch {
    throw new Error(`error body is not JSON: ${describe(req, res)}`);
  }
  const obj = body as Record<string, unknown>;
  if (typeof obj !== "object" || obj === null || Array.isArray(obj))
    throw new Error(`error body not an object: ${describe(req, res)}`);
  if (typeof obj.error !== "string" || !/^\S.*[.]$/s.test(obj.error) || obj.error.length > 300) {
    throw new Error(`error is not one sentence: ${describe(req, res)}`);
  }
  for (const key of Object.keys(obj))
    if (!ERROR_KEYS.has(key)) throw new Error(`unexpected key ${key}: ${describe(req, res)}`);
  if ((res.status === 429) !== (typeof obj.retryAfter === "number")) {
    throw new Error(`retryAfter must come with 429 and only then: ${describe(req, res)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Arbitraries

/** Characters Node lets through in a header value. */
const headerChar = fc.oneof(
  fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)),
  fc.constant("\t"),
);
export const headerValue = (maxLength = 80) => fc.string({ unit: headerChar, maxLength });

/** An Authorization header value (or none), biased towards near-misses of the real tokens. */
export function authorization(tokens: string[]): fc.Arbitrary<string | undefined> {
  const token = fc.constantFrom(...tokens);
  return fc.oneof(
    { weight: 4, arbitrary: token },
    { weight: 2, arbitrary: token.map((t) => `Bearer ${t}`) },
    { weight: 1, arbitrary: token.map((t) => `bot ${t}`) },
    { weight: 1, arbitrary: token.map((t) => `  BEARER\t${t}  `) },
    { weight: 1, arbitrary: fc.tuple(token, headerValue(4)).map(([t, x]) => `${t}${x}`) },
    { weight: 1, arbitrary: token.map((t) => `Basic ${Buffer.from(`u:${t}`).toString("base64")}`) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constant("") },
    { weight: 2, arbitrary: headerValue(80) },
    { weight: 1, arbitrary: fc.constant("x".repeat(5000)) },
  );
}

/** A path segment as sent: valid and near-valid ids, and arbitrary (encoded) strings. */
export function pathSegment(ids: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...ids) },
    { weight: 2, arbitrary: fc.stringMatching(/^\d{1,25}$/) },
    { weight: 1, arbitrary: fc.constantFrom(...ids).map((id) => `${id}0`) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(...ids)
        .map((id) => ` ${id}`)
        .map(encodeURIComponent),
    },
    { weight: 2, arbitrary: fc.string({ maxLength: 30 }).map(encodeURIComponent) },
    { weight: 2, arbitrary: fc.string({ unit: "grapheme", maxLength: 10 }).map(encodeURIComponent) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        "%",
        "%zz",
        "%E0%A4%A",
        "%C0%AF",
        "%00",
        "..",
        ".",
        "%2e%2e",
        "a%2Fb",
        "%FF",
        "-1",
        "1e18",
        "0x10",
        "%20",
      ),
    },
  );
}

/** A query string (with leading `?` or empty): known names with hostile values, junk names, bad encodings. */
export function queryString(names: string[], goodValues: string[]): fc.Arbitrary<string> {
  const value = fc.oneof(
    fc.constantFrom(...goodValues),
    fc.stringMatching(/^-?\d{0,25}$/),
    fc.string({ maxLength: 30 }).map(encodeURIComponent),
    fc.constantFrom("", "%", "%zz", "1e3", "NaN", "Infinity", "-0", "0x1f", "1.5", "%00", "[]", "a%ZZb"),
  );
  const name = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...names) },
    { weight: 1, arbitrary: fc.constantFrom(...names).map((n) => `${n}[]`) },
    { weight: 1, arbitrary: fc.constantFrom(...names).map((n) => `${n}[a]`) },
    { weight: 1, arbitrary: fc.string({ maxLength: 10 }).map(encodeURIComponent) },
    { weight: 1, arbitrary: fc.constantFrom("__proto__", "constructor", "%", "") },
  );
  const pair = fc.oneof(
    { weight: 5, arbitrary: fc.tuple(name, value).map(([n, v]) => `${n}=${v}`) },
    { weight: 1, arbitrary: name },
  );
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant("") },
    {
      weight: 4,
      arbitrary: fc.array(pair, { maxLength: 5 }).map((p) => (p.length ? `?${p.join("&")}` : "?")),
    },
  );
}

const contentType: fc.Arbitrary<string | undefined> = fc.oneof(
  { weight: 6, arbitrary: fc.constant("application/json") },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      undefined,
      "application/json; charset=utf-8",
      "application/json;charset=UTF-8",
      "application/json; charset=latin1",
      "application/json; charset=utf-16",
      "application/json; charset=bogus",
      "application/vnd.api+json",
      "APPLICATION/JSON",
      "text/plain",
      "text/json",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=xyz",
      "application/octet-stream",
      "",
    ),
  },
  { weight: 1, arbitrary: headerValue(40) },
);

/** JSON-ish bodies: valid JSON of any shape, the endpoint's own shape mutated, text, bytes. */
function body(shaped: fc.Arbitrary<unknown>): fc.Arbitrary<Buffer | undefined> {
  return fc.oneof(
    { weight: 5, arbitrary: shaped.map((v) => Buffer.from(JSON.stringify(v) ?? "null")) },
    {
      weight: 3,
      arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => Buffer.from(JSON.stringify(v) ?? "null")),
    },
    { weight: 1, arbitrary: shaped.map((v) => Buffer.from((JSON.stringify(v) ?? "").slice(0, -1))) },
    { weight: 1, arbitrary: fc.string({ maxLength: 200 }).map((s) => Buffer.from(s)) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(
          "",
          "{",
          "null",
          "[]",
          '{"__proto__":{"polluted":1}}',
          '{"constructor":{"prototype":{"x":1}}}',
          '"\\ud800"',
          "\ufeff{}",
          "1e999999",
          "[".repeat(5000) + "]".repeat(5000),
        )
        .map((s) => Buffer.from(s)),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

/** Extra headers: encodings the body does not have, odd accepts, junk. */
const extraHeaders: fc.Arbitrary<Record<string, string>> = fc
  .record(
    {
      "content-encoding": fc.constantFrom("gzip", "deflate", "br", "identity", "x-bogus"),
      accept: fc.constantFrom("*/*", "text/html", "application/xml", ""),
      "x-request-id": headerValue(80),
      "x-forwarded-for": fc.constantFrom("1.2.3.4", "::1, 10.0.0.1", "garbage", ""),
      "x-junk": headerValue(200),
    },
    { requiredKeys: [] },
  )
  .map((h) => {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = v;
    return out;
  });

export const method = (own: string) =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constant(own) },
    { weight: 2, arbitrary: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS") },
  );

/** Builds one request from generated parts. */
function build(parts: {
  method: string;
  path: string;
  auth?: string | undefined;
  contentType?: string | undefined;
  body?: Buffer | undefined;
  extra?: Record<string, string>;
  chunked?: boolean;
}): RawRequest {
  const headers: Record<string, string> = { ...parts.extra };
  if (parts.auth !== undefined) headers.authorization = parts.auth;
  if (parts.contentType !== undefined) headers["content-type"] = parts.contentType;
  return {
    method: parts.method,
    path: parts.path,
    headers,
    ...(parts.body === undefined ? {} : { body: parts.body }),
    ...(parts.chunked ? { chunked: true } : {}),
  };
}

/**
 * Requests to one endpoint: the method, path, query and Authorization the endpoint's arbitraries
 * give, a trailing slash after the path one time in four, and hostile content types, bodies (from
 * `shaped`, the endpoint's own body), extra headers and framing.
 */
export function endpointRequests(endpoint: {
  method: fc.Arbitrary<string>;
  path: fc.Arbitrary<string>;
  query: fc.Arbitrary<string>;
  auth: fc.Arbitrary<string | undefined>;
  shaped: fc.Arbitrary<unknown>;
}): fc.Arbitrary<RawRequest> {
  return fc
    .record({
      method: endpoint.method,
      path: endpoint.path,
      slash: fc.constantFrom("", "", "", "/"),
      query: endpoint.query,
      auth: endpoint.auth,
      contentType,
      body: body(endpoint.shaped),
      extra: extraHeaders,
      chunked: fc.boolean(),
    })
    .map((p) => build({ ...p, path: `${p.path}${p.slash}${p.query}` }));
}

/** Runs `runs` generated requests against the server, one at a time, each checked. */
export async function fuzz(
  port: number,
  requests: fc.Arbitrary<RawRequest>,
  allowed: readonly number[],
  runs = FUZZ_RUNS,
): Promise<Map<number, number>> {
  const seen = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(requests, async (req) => {
      const res = await send(port, req);
      seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
      checkAnswer(req, res, allowed);
    }),
    { seed: FUZZ_SEED, numRuns: runs, endOnFailure: false, verbose: 1 },
  );
  return seen;
}

/** One endpoint's fuzz test: its title, its generated requests, the statuses allowed, and those expected. */
export interface FuzzCase {
  title: string;
  /** Built when the test runs (after the file's beforeAll has seeded what the arbitraries use). */
  requests: () => fc.Arbitrary<RawRequest>;
  allowed: readonly number[];
  /** Runs for this endpoint (default FUZZ_RUNS). */
  runs?: number;
  /** Statuses the generated requests must each have been answered with at least once. */
  answered: readonly number[];
}

/** A test per case: every generated request answered as checkAnswer says, and each status of `answered` seen. */
export function fuzzEndpoints(port: () => number, cases: readonly FuzzCase[]): void {
  for (const c of cases) {
    it(c.title, async () => {
      const seen = await fuzz(port(), c.requests(), c.allowed, c.runs);
      expect(c.answered.filter((status) => !seen.has(status))).toEqual([]);
    });
  }
}

/**
 * The watch every fuzz file keeps on the app it serves: a logger that records every error the app
 * logs, the test process's unhandled rejections and exceptions, and after each endpoint's run the
 * checks that none happened and that the app still answers `healthPath` with 200. Call it at the
 * top level of the test file, before its own hooks.
 */
export function watchServedApp(healthPath: string, port: () => number): { logger: Logger } {
  const errors: string[] = [];
  const crashes: unknown[] = [];
  const onCrash = (error: unknown) => crashes.push(error);
  const logger: Logger = {
    info() {},
    warn() {},
    error(obj, msg) {
      errors.push(`${msg} ${JSON.stringify(obj)}`);
    },
  };
  beforeAll(() => {
    process.on("unhandledRejection", onCrash);
    process.on("uncaughtException", onCrash);
  });
  afterAll(() => {
    process.off("unhandledRejection", onCrash);
    process.off("uncaughtException", onCrash);
    destroyAgent();
  });
  afterEach(async () => {
    expect(crashes).toEqual([]);
    expect(errors).toEqual([]);
    const health = await send(port(), { method: "GET", path: healthPath, headers: {} });
    expect(health.status).toBe(200);
  });
  return { logger };
}

/**
 * A fuzz file's app, watched as watchServedApp says: `build` makes it on fresh test stores (seeding
 * what it needs first) with the watch's logger; it is served on a loopback port before the file's
 * tests (the seed and runs printed to reproduce them) and closed with the stores after them. Call
 * it at the top level of the test file, before its own hooks.
 */
export function useServedApp(
  label: string,
  healthPath: string,
  build: (stores: TestStores, logger: Logger) => RequestListener | Promise<RequestListener>,
): { readonly port: number } {
  let stores: TestStores | undefined;
  let served: Served | undefined;
  const port = () => {
    if (!served) throw new Error(`${label}: the app is not served`);
    return served.port;
  };
  const { logger } = watchServedApp(healthPath, port);
  beforeAll(async () => {
    stores = await startStores();
    served = await serve(await build(stores, logger));
    console.log(`${label}: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_RUNS}`);
  });
  afterAll(async () => {
    await served?.close();
    await stores?.close();
  });
  return {
    get port() {
      return port();
    },
  };
}
