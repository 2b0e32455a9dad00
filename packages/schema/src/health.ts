import { z } from "zod";

/** The body of every app's health endpoint, as a schema (used for the OpenAPI documents). */
export const HealthBody = z.object({
  status: z.enum(["ok", "unavailable"]),
  checks: z.record(z.string(), z.enum(["ok", "down"])),
  error: z.string().optional(),
});
