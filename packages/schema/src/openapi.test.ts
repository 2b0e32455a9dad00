import { z } from "zod";
import type { JsonObject } from "./openapi.js";
import { errorResponse, jsonContent, openApiDocument, schemaRef, toJsonSchema } from "./openapi.js";

/** A document of no paths whose `components.schemas` are built from `schemas` (webhooks when given). */
const documentOf = (schemas: Parameters<typeof openApiDocument>[0]["schemas"], webhooks?: JsonObject) =>
  openApiDocument({
    title: "T",
    description: "D",
    paths: {},
    ...(webhooks ? { webhooks } : {}),
    security: { scheme: "key", description: "The key." },
    schemas,
  });

describe("OpenAPI helpers", () => {
  it("when a zod schema is converted, then the JSON Schema has no $schema line and follows the side asked for", () => {
    const Body = z.object({ limit: z.number().default(5) });
    const input = toJsonSchema(Body, "input");
    const output = toJsonSchema(Body, "output");
    expect(input).not.toHaveProperty("$schema");
    expect(input.required).toBeUndefined(); // a default makes the field optional on input
    expect(output.required).toEqual(["limit"]); // and always present on output
    expect(output.additionalProperties).toBe(false);
  });

  it("when components are built, then each name holds the schema of its side", () => {
    const Strict = z.strictObject({ id: z.string().regex(/^\d+$/) });
    const { components: built } = documentOf({
      Strict: [Strict, "input"],
      Out: [z.object({ ok: z.boolean() }), "output"],
    }) as { components: { schemas: Record<string, unknown> } };
    const components = built.schemas;
    expect(Object.keys(components)).toEqual(["Strict", "Out"]);
    expect(components.Strict).toMatchObject({
      additionalProperties: false,
      properties: { id: { pattern: "^\\d+$" } },
    });
    expect(components.Out).toMatchObject({ properties: { ok: { type: "boolean" } }, required: ["ok"] });
  });

  it("when an error response is described, then it refers to the Error component, with headers when given", () => {
    expect(errorResponse("Nope.")).toEqual({
      description: "Nope.",
      content: jsonContent(schemaRef("Error")),
    });
    expect(errorResponse("Slow down.", { "Retry-After": {} })).toMatchObject({
      headers: { "Retry-After": {} },
    });
    expect(schemaRef("X")).toEqual({ $ref: "#/components/schemas/X" });
  });

  it("when a document is built, then it is OpenAPI 3.1 with its paths, its Authorization scheme and its schemas, and webhooks only when given", () => {
    const document = documentOf({ Out: [z.object({ ok: z.boolean() }), "output"] });
    expect(document).toMatchObject({
      openapi: "3.1.0",
      info: { title: "T", version: "1.0.0", description: "D" },
      servers: [{ url: "/" }],
      paths: {},
      components: {
        securitySchemes: {
          key: { type: "apiKey", in: "header", name: "Authorization", description: "The key." },
        },
        schemas: { Out: { properties: { ok: { type: "boolean" } } } },
      },
    });
    expect(document).not.toHaveProperty("webhooks");
    expect(documentOf({}, { "vote.create": {} }).webhooks).toEqual({ "vote.create": {} });
  });
});
