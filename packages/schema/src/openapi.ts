/**
 * Building blocks of the apps' OpenAPI 3.1 documents (apps/api: the public API; apps/vote-ingest:
 * the internal endpoints). Schemas come from zod through zod's own z.toJSONSchema: OpenAPI 3.1
 * schemas are JSON Schema 2020-12, so the output is used as is, minus its `$schema` line.
 */
import { z } from "zod";
import { CONFLICT_CAUSES, CONFLICT_HEADER, type ConflictCause } from "./errors.js";

export type JsonObject = Record<string, unknown>;

/** Which side of a zod schema to describe: what a request may send, or what a response holds. */
export type SchemaSide = "input" | "output";

/** The JSON Schema (2020-12) of a zod schema, without `$schema`, for use inside an OpenAPI document. */
export function toJsonSchema(schema: z.ZodType, io: SchemaSide): JsonObject {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, {
    io,
    target: "draft-2020-12",
    unrepresentable: "any",
  }) as JsonObject;
  return rest;
}

/** `components.schemas` from named zod schemas: request bodies as input, responses as output. */
function componentSchemas(entries: Record<string, [z.ZodType, SchemaSide]>): JsonObject {
  return Object.fromEntries(
    Object.entries(entries).map(([name, [schema, io]]) => [name, toJsonSchema(schema, io)]),
  );
}

/** A security scheme of a credential sent in the Authorization header. */
const authorizationHeader = (description: string): JsonObject => ({
  type: "apiKey",
  in: "header",
  name: "Authorization",
  description,
});

/**
 * An OpenAPI 3.1 document served from the app's own origin: its paths (and webhooks), one security
 * scheme of a credential in the Authorization header, and component schemas from named zod schemas.
 */
export function openApiDocument(input: {
  title: string;
  description: string;
  paths: JsonObject;
  webhooks?: JsonObject;
  /** The security scheme's name (what operations list under `security`) and its description. */
  security: { scheme: string; description: string };
  schemas: Record<string, [z.ZodType, SchemaSide]>;
}): JsonObject {
  return {
    openapi: "3.1.0",
    info: { title: input.title, version: "1.0.0", description: input.description },
    servers: [{ url: "/" }],
    paths: input.paths,
    ...(input.webhooks ? { webhooks: input.webhooks } : {}),
    components: {
      securitySchemes: { [input.security.scheme]: authorizationHeader(input.security.description) },
      schemas: componentSchemas(input.schemas),
    },
  };
}

/** A reference to a component schema. */
export const schemaRef = (name: string): JsonObject => ({ $ref: `#/components/schemas/${name}` });

/** The `content` of a JSON request or response. */
export const jsonContent = (schema: JsonObject): JsonObject => ({ "application/json": { schema } });

/** The name of the error body component every document defines (`ErrorBody`). */
export const ERROR_COMPONENT = "Error";

/** A failure response: the spec's error body `{error}`, optionally with headers. */
export function errorResponse(description: string, headers?: JsonObject): JsonObject {
  return { description, content: jsonContent(schemaRef(ERROR_COMPONENT)), ...(headers ? { headers } : {}) };
}

/**
 * The `X-Botdir-Conflict` header of a 409 (every 409 carries it): its cause, among `causes`, so a
 * client tells causes apart without reading the sentence.
 */
export function conflictHeaders(...causes: ConflictCause[]): JsonObject {
  return {
    [CONFLICT_HEADER]: {
      description: `Why the request conflicts: ${causes.map((c) => `\`${c}\` (${CONFLICT_CAUSES[c]})`).join(", ")}.`,
      required: true,
      schema: { type: "string", enum: causes },
    },
  };
}

/** A 409: the error body with its `X-Botdir-Conflict` header. */
export function conflictResponse(description: string, ...causes: ConflictCause[]): JsonObject {
  return errorResponse(description, conflictHeaders(...causes));
}
