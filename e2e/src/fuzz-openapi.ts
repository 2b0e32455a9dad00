/**
 * The fuzz harness (fuzz.ts) driven by an OpenAPI 3.1 document: for every operation, requests whose
 * path parameters, query parameters, headers and JSON body are generated from the document's own
 * schemas — values that satisfy them, values at and just past their bounds, and values of no
 * allowed shape — and the check that every answer is a status the operation documents (never a
 * 5xx), with a body that matches the document's schema for that status (and fuzz.ts's error rules).
 */
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import fc from "fast-check";
import { checkAnswer, headerValue, type RawRequest, type RawResponse, send } from "./fuzz.js";

/** The part of JSON Schema (2020-12) the documents use. */
export interface JsonSchema {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  default?: unknown;
}

export interface Parameter {
  name: string;
  in: "path" | "query" | "header" | "cookie";
  required?: boolean;
  schema?: JsonSchema;
}

interface MediaType {
  schema?: JsonSchema;
  example?: unknown;
}

export interface Operation {
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content: Record<string, MediaType> };
  responses: Record<string, { content?: Record<string, MediaType> }>;
  security?: Record<string, string[]>[];
}

export interface OpenApiDocument {
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, JsonSchema> };
}

export interface DocumentOperation {
  method: string;
  path: string;
  operation: Operation;
}

const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

/** Every operation of the document, in its order. */
export function operationsOf(doc: OpenApiDocument): DocumentOperation[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, operation]) => ({ method: method.toUpperCase(), path, operation })),
  );
}

/**
 * What the caller knows that a schema cannot say: good values by parameter or property name (the
 * seeded bot ids, delivery ids, cursors, user ids), and the Authorization values of each security
 * scheme (the real key or token and near misses).
 */
export interface FuzzHints {
  values: Record<string, readonly string[]>;
  /** Per security scheme: the Authorization value that passes, and near misses of it. */
  security: Record<string, { real: string; misses: fc.Arbitrary<string | undefined> }>;
}

function resolve(schema: JsonSchema, doc: OpenApiDocument): JsonSchema {
  const ref = schema.$ref;
  if (ref === undefined) return schema;
  const name = ref.replace(/^#\/components\/schemas\//, "");
  const target = doc.components?.schemas?.[name];
  if (target === undefined) throw new Error(`unresolved ${ref}`);
  return resolve(target, doc);
}

const typesOf = (s: JsonSchema): string[] =>
  s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];

/** Instants PostgreSQL and toISOString() both take, their edges, and the years just outside. */
const DATE_TIMES = [
  "2026-11-21T12:00:00Z",
  "2026-11-21T12:00:00.000Z",
  "2026-11-21T14:00:00+02:00",
  "0001-01-01T00:00:00Z",
  "0001-01-01T00:00:00-14:00",
  "9999-12-31T23:59:59.999Z",
  "9999-12-31T23:59:59+14:00",
  "0000-01-01T00:00:00Z",
  "0000-01-01T00:00:00+14:00",
  "9999-12-31T23:59:59-14:00",
  "2024-02-29T00:00:00Z",
  "2026-02-29T00:00:00Z",
  "2026-11-21T12:00:00.123456789Z",
  "2026-11-21T24:00:00Z",
  "2026-11-21T12:00:00+24:00",
  "2026-11-21",
  "2026-11-21T12:00:00",
];

/** Values that satisfy `schema` (as far as its keywords say), with hints for named values. */
export function validValue(
  schema: JsonSchema,
  doc: OpenApiDocument,
  hints: FuzzHints,
  name?: string,
): fc.Arbitrary<unknown> {
  const s = resolve(schema, doc);
  const hinted = name === undefined ? undefined : hints.values[name];
  if (hinted !== undefined && hinted.length > 0 && typesOf(s).includes("string")) {
    return fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...hinted) },
      { weight: 1, arbitrary: shaped(s) },
    );
  }
  return shaped(s);

  function shaped(s: JsonSchema): fc.Arbitrary<unknown> {
    if (s.const !== undefined) return fc.constant(s.const);
    if (s.enum !== undefined) return fc.constantFrom(...s.enum);
    const options = s.anyOf ?? s.oneOf;
    if (options !== undefined) return fc.oneof(...options.map((o) => validValue(o, doc, hints, name)));
    const types = typesOf(s);
    if (types.length === 0) return fc.jsonValue({ maxDepth: 2 });
    return fc.oneof(...types.map((type) => ofType(s, type)));
  }

  function ofType(s: JsonSchema, type: string): fc.Arbitrary<unknown> {
    switch (type) {
      case "null":
        return fc.constant(null);
      case "boolean":
        return fc.boolean();
      case "integer": {
        const range = fc.integer({
          min: Math.max(s.minimum ?? -1e6, -1e15),
          max: Math.min(s.maximum ?? 1e6, 1e15),
        });
        const stated = [s.minimum, s.maximum, s.default].filter((v) => typeof v === "number");
        return stated.length === 0 ? range : fc.oneof(range, fc.constantFrom(...stated));
      }
      case "number":
        return fc.double({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6, noNaN: true });
      case "string":
        return stringOf(s);
      case "array": {
        const item = s.items ? validValue(s.items, doc, hints) : fc.jsonValue({ maxDepth: 1 });
        return fc.array(item, { minLength: s.minItems ?? 0, maxLength: Math.min(s.maxItems ?? 5, 5) });
      }
      case "object":
        return objectOf(s);
      default:
        return fc.jsonValue({ maxDepth: 1 });
    }
  }

  function stringOf(s: JsonSchema): fc.Arbitrary<string> {
    if (s.format === "date-time") return fc.constantFrom(...DATE_TIMES.slice(0, 7));
    if (s.pattern !== undefined) return fc.stringMatching(new RegExp(s.pattern));
    return fc.string({ minLength: s.minLength ?? 0, maxLength: s.maxLength ?? 40 });
  }

  function objectOf(s: JsonSchema): fc.Arbitrary<unknown> {
    const properties = s.properties ?? {};
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [key, child] of Object.entries(properties)) model[key] = validValue(child, doc, hints, key);
    return fc.record(model, { requiredKeys: s.required ?? [] });
  }
}

/** Values at and just past the bounds the schema states (lengths, ranges, patterns, dates). */
export function boundaryValue(schema: JsonSchema, doc: OpenApiDocument): fc.Arbitrary<unknown> {
  const s = resolve(schema, doc);
  const options = s.anyOf ?? s.oneOf;
  if (options !== undefined) return fc.oneof(...options.map((o) => boundaryValue(o, doc)));
  const values: unknown[] = [];
  for (const type of typesOf(s)) {
    if (type === "integer" || type === "number") {
      for (const bound of [s.minimum, s.maximum]) {
        if (bound !== undefined) values.push(bound, bound - 1, bound + 1);
      }
      values.push(0, -1, 2 ** 53, -(2 ** 53), 1.5, 1e308);
    }
    if (type === "string") {
      if (s.format === "date-time") values.push(...DATE_TIMES);
      const min = s.minLength ?? 0;
      values.push("x".repeat(min), min > 0 ? "x".repeat(min - 1) : "");
      if (s.maxLength !== undefined) values.push("x".repeat(s.maxLength), "x".repeat(s.maxLength + 1));
      if (s.pattern?.includes("\\d{")) {
        // Digit runs one shorter and one longer than the pattern's, and a huge one.
        const [, lo, hi] = /\\d\{(\d+),(\d+)\}/.exec(s.pattern) ?? [];
        if (lo && hi)
          values.push("1".repeat(Number(lo) - 1), "9".repeat(Number(hi) + 1), "9".repeat(Number(hi)));
        values.push("0".repeat(400));
      }
    }
    if (type === "array") {
      const item = s.items ? resolve(s.items, doc) : {};
      const filler = typesOf(item).includes("integer") ? 0 : {};
      if (s.maxItems !== undefined) values.push(new Array(s.maxItems + 1).fill(filler));
      values.push([]);
    }
  }
  return values.length > 0 ? fc.constantFrom(...values) : fc.constant(null);
}

/** Values of no shape the schema allows: other types, junk strings, hostile JSON. */
export function invalidValue(): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.jsonValue({ maxDepth: 3 }),
    fc.string({ maxLength: 40 }),
    fc.string({ unit: "grapheme", maxLength: 10 }),
    fc.constantFrom("", " ", "null", "NaN", "-0", "1e999", "%", "\u0000", "__proto__", [], {}, null, true),
  );
}

/** A valid value four times in ten, a boundary value three, an invalid one three. */
export function anyValue(
  schema: JsonSchema | undefined,
  doc: OpenApiDocument,
  hints: FuzzHints,
  name?: string,
): fc.Arbitrary<unknown> {
  if (schema === undefined) return invalidValue();
  return fc.oneof(
    { weight: 4, arbitrary: validValue(schema, doc, hints, name) },
    { weight: 3, arbitrary: boundaryValue(schema, doc) },
    { weight: 3, arbitrary: invalidValue() },
  );
}

/** A body whose properties each get anyValue (so one bad field beside good ones is common). */
function bodyValue(schema: JsonSchema, doc: OpenApiDocument, hints: FuzzHints): fc.Arbitrary<unknown> {
  const s = resolve(schema, doc);
  const fieldwise =
    s.properties === undefined
      ? anyValue(s, doc, hints)
      : fc.record(
          Object.fromEntries(
            Object.entries(s.properties).map(([key, child]) => [key, anyValue(child, doc, hints, key)]),
          ),
          { requiredKeys: [] },
        );
  return fc.oneof(
    { weight: 3, arbitrary: validValue(s, doc, hints) },
    { weight: 4, arbitrary: fieldwise },
    { weight: 1, arbitrary: boundaryValue(s, doc) },
    { weight: 1, arbitrary: invalidValue() },
  );
}

/** A parameter's value as it travels in a URL or header: strings as they are, the rest as JSON. */
const asText = (value: unknown): string =>
  typeof value === "string" ? value : (JSON.stringify(value) ?? "");

/**
 * Generated requests for one operation of `doc`: one in three well-formed (every parameter and the
 * body valid, the hinted values and the real credential, so the success path is exercised), the
 * others hostile (each part valid, at a bound or invalid on its own, near-miss credentials).
 */
export function operationRequests(
  op: DocumentOperation,
  doc: OpenApiDocument,
  hints: FuzzHints,
): fc.Arbitrary<RawRequest> {
  return fc.oneof(
    { weight: 1, arbitrary: requestsOf(op, doc, hints, "well-formed") },
    { weight: 2, arbitrary: requestsOf(op, doc, hints, "hostile") },
  );
}

function requestsOf(
  op: DocumentOperation,
  doc: OpenApiDocument,
  hints: FuzzHints,
  mode: "well-formed" | "hostile",
): fc.Arbitrary<RawRequest> {
  const parameters = op.operation.parameters ?? [];
  const paramValue = (p: Parameter) =>
    (mode === "hostile" || p.schema === undefined
      ? anyValue(p.schema, doc, hints, p.name)
      : validValue(p.schema, doc, hints, p.name)
    ).map(asText);
  const path = fc
    .tuple(
      // An empty segment would address another resource (`/bots/` is not `/bots/{id}`).
      ...parameters
        .filter((p) => p.in === "path")
        .map((p) =>
          paramValue(p)
            .filter((v) => v !== "")
            .map((v) => [p.name, v] as const),
        ),
    )
    .map((pairs) =>
      pairs.reduce((acc, [name, v]) => acc.replace(`{${name}}`, encodeURIComponent(v)), op.path),
    );
  const queryPairs = parameters
    .filter((p) => p.in === "query")
    .map((p) =>
      fc.oneof(
        { weight: p.required ? 0 : 1, arbitrary: fc.constant([] as string[]) },
        { weight: 4, arbitrary: paramValue(p).map((v) => [`${p.name}=${encodeURIComponent(v)}`]) },
        // Repeated: Express hands the route an array.
        {
          weight: mode === "hostile" ? 1 : 0,
          arbitrary: fc
            .tuple(paramValue(p), paramValue(p))
            .map(([a, b]) => [`${p.name}=${encodeURIComponent(a)}`, `${p.name}=${encodeURIComponent(b)}`]),
        },
      ),
    );
  const query = fc.tuple(...queryPairs).map((lists) => {
    const pairs = lists.flat();
    return pairs.length === 0 ? "" : `?${pairs.join("&")}`;
  });
  const headerParams = parameters
    .filter((p) => p.in === "header")
    .map((p) => fc.option(paramValue(p), { nil: undefined }).map((v) => [p.name.toLowerCase(), v] as const));
  const schemes = (op.operation.security ?? []).flatMap((s) => Object.keys(s));
  const credential = (name: string) => {
    const scheme = hints.security[name];
    if (scheme === undefined) return fc.constant(undefined);
    return mode === "hostile"
      ? fc.oneof({ weight: 2, arbitrary: fc.constant(scheme.real) }, { weight: 1, arbitrary: scheme.misses })
      : fc.constant(scheme.real);
  };
  const auth: fc.Arbitrary<string | undefined> =
    schemes.length === 0
      ? fc.option(headerValue(40), { nil: undefined, freq: 4 })
      : fc.oneof(...schemes.map(credential));
  const media = op.operation.requestBody?.content["application/json"];
  const json = media?.schema;
  // The document's example is a body the operation accepts.
  const example = media?.example === undefined ? [] : [{ weight: 2, arbitrary: fc.constant(media.example) }];
  const shaped =
    json === undefined
      ? []
      : mode === "hostile"
        ? [{ weight: 7, arbitrary: bodyValue(json, doc, hints) }, ...example]
        : [{ weight: 2, arbitrary: validValue(json, doc, hints) }, ...example];
  const body: fc.Arbitrary<Buffer | undefined> =
    json === undefined
      ? fc.constant(undefined)
      : fc.oneof(
          ...shaped.map(({ weight, arbitrary }) => ({
            weight,
            arbitrary: arbitrary.map((v) => Buffer.from(JSON.stringify(v) ?? "null")),
          })),
          { weight: mode === "hostile" ? 1 : 0, arbitrary: fc.constant(undefined) },
        );
  return fc.record({ path, query, headers: fc.tuple(...headerParams), auth, body }).map((r) => {
    const headers: Record<string, string> = {};
    for (const [name, value] of r.headers) if (value !== undefined) headers[name] = value;
    if (r.auth !== undefined) headers.authorization = r.auth;
    if (r.body !== undefined) headers["content-type"] = "application/json";
    return {
      method: op.method,
      path: `${r.path}${r.query}`,
      headers,
      ...(r.body === undefined ? {} : { body: r.body }),
    };
  });
}

/** JSON pointer escaping (RFC 6901). */
const pointer = (...parts: string[]) =>
  parts.map((p) => encodeURIComponent(p.replace(/~/g, "~0").replace(/\//g, "~1"))).join("/");

/** The checks of one document's answers: documented status, no 5xx, the schema of that status. */
export function answerChecker(doc: OpenApiDocument, id: string) {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema({ ...doc, $id: id });
  const compiled = new Map<string, ValidateFunction>();
  const validator = (op: DocumentOperation, status: string, type: string) => {
    const key = `${op.method} ${op.path} ${status} ${type}`;
    let validate = compiled.get(key);
    if (!validate) {
      const at = pointer(
        "paths",
        op.path,
        op.method.toLowerCase(),
        "responses",
        status,
        "content",
        type,
        "schema",
      );
      validate = ajv.compile({ $ref: `${id}#/${at}` });
      compiled.set(key, validate);
    }
    return validate;
  };
  return (op: DocumentOperation, req: RawRequest, res: RawResponse): void => {
    const documented = Object.keys(op.operation.responses).map(Number);
    checkAnswer(req, res, documented);
    const content = op.operation.responses[String(res.status)]?.content ?? {};
    const types = Object.keys(content);
    if (types.length === 0 || req.method === "HEAD") return;
    const contentType = String(res.headers["content-type"] ?? "");
    const type = types.find((t) => contentType.startsWith(t));
    const shown = `${req.method} ${req.path} -> ${res.status} ${res.body.subarray(0, 300).toString()}`;
    if (type === undefined) {
      throw new Error(`Content-Type ${contentType} is not one of ${types.join(", ")}: ${shown}`);
    }
    if (type !== "application/json" || content[type]?.schema === undefined) return;
    const validate = validator(op, String(res.status), type);
    if (!validate(JSON.parse(res.body.toString("utf8")))) {
      throw new Error(`body does not match the document: ${ajv.errorsText(validate.errors)}: ${shown}`);
    }
  };
}

/** Runs `runs` generated requests of one operation under `seed`, each answer checked. */
export async function fuzzOperation(input: {
  port: number;
  op: DocumentOperation;
  doc: OpenApiDocument;
  hints: FuzzHints;
  check: ReturnType<typeof answerChecker>;
  seed: number;
  runs: number;
}): Promise<Map<number, number>> {
  const seen = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(operationRequests(input.op, input.doc, input.hints), async (req) => {
      const res = await send(input.port, req);
      seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
      input.check(input.op, req, res);
    }),
    { seed: input.seed, numRuns: input.runs, endOnFailure: true, verbose: 1 },
  );
  return seen;
}
