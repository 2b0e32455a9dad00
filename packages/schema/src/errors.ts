import { z } from "zod";

/** The error body of every failure: one sentence, plus retryAfter (seconds) on 429. */
export interface ErrorBodyShape {
  error: string;
  retryAfter?: number;
}

export const ErrorBody = z.object({ error: z.string(), retryAfter: z.number().int().optional() });

export const ERROR_STATUS = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/**
 * Every 409 names its cause in this response header, so that a client tells causes apart without
 * reading the sentence (the error body's shape is fixed by the spec). A 409 without a cause of
 * its own is sent `conflict`.
 */
export const CONFLICT_HEADER = "X-Botdir-Conflict";
export const CONFLICT_CAUSES = {
  already_voted: "the user voted for the bot within the last 12 hours",
  bot_exists: "a bot with this id already exists",
  not_approved: "the bot is not approved yet",
  no_webhook: "the bot has no webhook URL",
  webhook_changed: "the webhook changed during the request",
  delivery_pending: "the delivery is still pending (a redelivery already started it)",
  webhook_disabled: "the webhook is disabled; enable it first",
  recovery_running: "a recovery over an overlapping window is still running",
  conflict: "a 409 without a cause of its own",
} as const;
export type ConflictCause = keyof typeof CONFLICT_CAUSES;

/** The one error type of the apps. The error middleware turns it into the spec's error body. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Extra fields merged into the body, e.g. retryAfter or nextVoteAt. */
  readonly extra: Record<string, unknown>;
  /** A 409's cause, sent in the X-Botdir-Conflict header (never in the body). */
  readonly conflict: ConflictCause | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    extra: Record<string, unknown> = {},
    options: { conflict?: ConflictCause } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.extra = extra;
    this.conflict = options.conflict;
  }

  /** A 409 with its cause. */
  static conflict(cause: ConflictCause, message: string, extra: Record<string, unknown> = {}): ApiError {
    return new ApiError("conflict", message, extra, { conflict: cause });
  }

  body(): ErrorBodyShape & Record<string, unknown> {
    return { error: this.message, ...this.extra };
  }
}

/** Sentences used by more than one app; one place so they stay byte-identical. */
export const MESSAGES = {
  invalidJson: "Invalid JSON body.",
  invalidToken: "Invalid token.",
  botNotFound: "Bot not found.",
  rateLimited: "Rate limit exceeded.",
  internal: "The request could not be completed; retry with backoff.",
  unsupportedMediaType: "Content-Type must be application/json.",
  bodyTooLarge: "The request body is too large.",
  routeNotFound: "No such endpoint.",
  methodNotAllowed: "Method not allowed on this endpoint.",
  invalidInternalKey: "Invalid internal API key.",
} as const;

function describePath(path: readonly PropertyKey[], root: string): string {
  if (path.length === 0) return root;
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out;
}

/** True when the value at `path` inside `input` is absent or undefined. */
function isMissing(input: unknown, path: readonly PropertyKey[]): boolean {
  let current: unknown = input;
  for (const key of path) {
    if (current === null || typeof current !== "object") return true;
    current = (current as Record<PropertyKey, unknown>)[key];
  }
  return current === undefined;
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/**
 * Turns the first zod issue into one sentence naming the field, e.g.
 * "commands[3].name must be 1 to 32 characters long."
 */
export function describeIssue(issue: z.core.$ZodIssue, root = "The body", input?: unknown): string {
  const where = describePath(issue.path, root);
  switch (issue.code) {
    case "invalid_type": {
      if (issue.path.length > 0 && isMissing(input, issue.path)) return `${where} is required.`;
      if (!issue.message.startsWith("Invalid input")) return `${where} ${issue.message.replace(/\.$/, "")}.`;
      return `${where} must be ${article(issue.expected === "object" ? "JSON object" : issue.expected)}.`;
    }
    case "unrecognized_keys":
      return `${where} has an unknown field: ${issue.keys[0] ?? ""}.`;
    default: {
      const message = issue.message.replace(/\.$/, "");
      if (message.startsWith("must ") || message.startsWith("is ") || message.startsWith("has ")) {
        return `${where} ${message}.`;
      }
      return `${where}: ${message}.`;
    }
  }
}

/** Parses `value` or throws the 400 ApiError naming the first problem. */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, root = "The body"): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const first = result.error.issues[0];
  throw new ApiError("bad_request", first ? describeIssue(first, root, value) : "The request is invalid.");
}
