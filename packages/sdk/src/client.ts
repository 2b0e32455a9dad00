import type {
  Command,
  CommandsResponse,
  DeliveryAttempt,
  RecoverResponse,
  RecoveryResponse,
  RedeliverResponse,
  StatsResponse,
  Vote,
  VoteCheckResult,
  VotesPage,
} from "./contract.js";
import { ApiError, InvalidResponseError } from "./errors.js";
import { type RetryOptions, type RetryPolicy, retryDelay, retryPolicy } from "./retry.js";

export interface BotDirClientOptions {
  /** The service's base address, e.g. `https://botdir.example` (a trailing `/api/v1` is accepted too). */
  baseUrl: string;
  /** The bot's API token (shown once on the bot's edit page). */
  token: string;
  /** The bot's application id. */
  botId: string;
  /** A `fetch` to use instead of the global one (a proxy agent, a test double, an older runtime). */
  fetch?: typeof fetch;
  /** Retry policy; `false` turns retries off. See `RetryOptions` for the defaults. */
  retry?: RetryOptions | false;
  /** Deadline of one attempt in milliseconds (default 15 s); a timeout is retried like a network error. */
  timeoutMs?: number;
}

/** The server count of the whole bot, or of one shard (`shardId`, optionally with `shardCount`). */
export interface StatsInput {
  serverCount: number;
  shardId?: number;
  shardCount?: number;
  /** Per-shard counts (top.gg style); the bot's count is their sum. */
  shards?: number[];
}

type Query = Record<string, string | number | undefined>;

/** Client of the directory's API for one bot. Every method retries as `retry` says. */
export class BotDirClient {
  readonly botId: string;
  readonly #base: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #policy: RetryPolicy;
  readonly #timeoutMs: number;

  constructor(options: BotDirClientOptions) {
    if (!options.baseUrl) throw new TypeError("baseUrl is required");
    if (!options.token) throw new TypeError("token is required");
    if (!options.botId) throw new TypeError("botId is required");
    this.botId = options.botId;
    // Other directories' clients are configured with the `/api/v1` base; both spellings work here.
    const base = options.baseUrl.replace(/\/+$/, "").replace(/\/api\/v1$/, "");
    this.#base = `${base}/api/v1/bots/${encodeURIComponent(options.botId)}`;
    this.#token = options.token;
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#policy = retryPolicy(options.retry);
    this.#timeoutMs = options.timeoutMs ?? 15_000;
  }

  /** POST /stats: the server count (of the bot, or of one shard). */
  postStats(stats: StatsInput): Promise<StatsResponse> {
    return this.#request("POST", "/stats", {
      // Setting the count twice sets the same count: safe to retry.
      valid: (a) => typeof a.server_count === "number",
      body: {
        server_count: stats.serverCount,
        shard_id: stats.shardId,
        shard_count: stats.shardCount,
        shards: stats.shards,
      },
    });
  }

  /** PUT /commands: replaces the whole command list (an empty array clears it). */
  putCommands(commands: readonly Command[]): Promise<CommandsResponse> {
    return this.#request("PUT", "/commands", {
      body: { commands },
      valid: (a) => typeof a.count === "number",
    });
  }

  /** GET /check: whether the user is inside the 12-hour vote window. */
  check(userId: string): Promise<VoteCheckResult> {
    return this.#request("GET", "/check", {
      query: { userId },
      valid: (a) => typeof a.hasVoted === "boolean",
    });
  }

  /** True when the user voted in the last 12 hours. */
  async hasVoted(userId: string): Promise<boolean> {
    return (await this.check(userId)).hasVoted;
  }

  /** GET /votes: the newest votes, newest first (`limit` 1–100, server default 50). */
  async votes(options: { limit?: number } = {}): Promise<Vote[]> {
    const page = await this.#request<{ votes: Vote[] }>("GET", "/votes", {
      query: { limit: options.limit },
      valid: (a) => Array.isArray(a.votes),
    });
    return page.votes;
  }

  /**
   * Every vote at or after `since`, oldest first, page by page (`GET /votes?since=&cursor=`): for
   * catching up after downtime. It ends at the newest *settled* vote: a vote is listed only once it
   * is 10 seconds old, so one cast just now is not there yet. Iterate again later from the last
   * `voted_at`.
   */
  async *votesSince(
    since: Date | string,
    options: { limit?: number } = {},
  ): AsyncGenerator<Vote, void, undefined> {
    const sinceIso = typeof since === "string" ? since : since.toISOString();
    let cursor: string | undefined;
    do {
      const page: VotesPage = await this.#request("GET", "/votes", {
        query: { since: sinceIso, cursor, limit: options.limit ?? 100 },
        valid: (a) =>
          Array.isArray(a.votes) && (a.nextCursor === undefined || typeof a.nextCursor === "string"),
      });
      yield* page.votes;
      cursor = page.nextCursor;
    } while (cursor !== undefined);
  }

  /** GET /webhook/deliveries: the last ten delivery attempts, newest first. */
  async webhookDeliveries(): Promise<DeliveryAttempt[]> {
    const list = await this.#request<{ attempts: DeliveryAttempt[] }>("GET", "/webhook/deliveries", {
      valid: (a) => Array.isArray(a.attempts),
    });
    return list.attempts;
  }

  /**
   * POST …/redeliver: sends a delivered or failed delivery again (a fresh series of attempts). When
   * an attempt got no answer (a timeout or a network error) or a 5xx and the retry is told the
   * delivery is pending (409 with `X-Botdir-Conflict: delivery_pending`), an earlier attempt did start it: that is reported as started, with
   * `series: null` (its number is unknown).
   * A 2xx it cannot read is thrown at once (`InvalidResponseError`), never retried into a second series.
   */
  redeliver(deliveryId: string): Promise<RedeliverResponse> {
    return this.#request("POST", `/webhook/deliveries/${encodeURIComponent(deliveryId)}/redeliver`, {
      idempotent: false,
      valid: (a) => typeof a.deliveryId === "string" && typeof a.series === "number",
      // Only a 409 that says the delivery is pending means the lost attempt started the series;
      // any other 409 (no webhook URL, or no cause named) is thrown as it is.
      afterLostAnswer: (error) =>
        error.status === 409 && error.conflict === "delivery_pending"
          ? { deliveryId, state: "pending" as const, series: null }
          : undefined,
    });
  }

  /**
   * POST /webhook/recover: sends every vote since `since` (up to `until`, default now) whose delivery
   * did not succeed again; the window may reach back 14 days. A 409 names a recovery over an
   * overlapping window that still runs (also the one an attempt whose answer was lost started), or
   * says the webhook is disabled (enable it first). Not retried after a lost answer on its own:
   * the 409 is thrown and names the recovery.
   */
  recover(since: Date | string, until?: Date | string): Promise<RecoverResponse> {
    const text = (t: Date | string) => (typeof t === "string" ? t : t.toISOString());
    return this.#request("POST", "/webhook/recover", {
      idempotent: false,
      body: { since: text(since), ...(until === undefined ? {} : { until: text(until) }) },
      valid: (a) => typeof a.recoveryId === "string" && typeof a.queued === "number",
    });
  }

  /** GET /webhook/recoveries/{id}: a recovery's counts (queued, delivered, failed, pending) and state. */
  recovery(recoveryId: string): Promise<RecoveryResponse> {
    return this.#request("GET", `/webhook/recoveries/${encodeURIComponent(recoveryId)}`, {
      valid: (a) => typeof a.recoveryId === "string" && typeof a.state === "string",
    });
  }

  /**
   * One call with the retry policy. A 2xx is accepted only when its body is JSON that `valid`
   * recognises; otherwise it counts as a network error for an idempotent call (retried) and is thrown
   * at once for the others. `afterLostAnswer` may turn an error into a result when an earlier
   * attempt may have reached the server without its answer reaching us.
   */
  async #request<T>(method: string, path: string, options: RequestOptions<T>): Promise<T> {
    const url = this.#base + path + queryString(options.query);
    const headers: Record<string, string> = { authorization: this.#token, accept: "application/json" };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const idempotent = options.idempotent ?? true;
    let answerLost = false;
    for (let attempt = 1; ; attempt++) {
      let response: Response;
      let text: string;
      try {
        response = await this.#fetch(url, {
          method,
          headers,
          body,
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
      } catch (error) {
        answerLost = true;
        const delay = retryDelay({ networkError: true }, attempt, this.#policy);
        if (delay === null) throw error;
        await sleep(delay);
        continue;
      }
      if (response.ok) {
        const read = await readAnswer(response, options.valid);
        if (!(read instanceof InvalidResponseError)) return read as T;
        answerLost = true;
        const delay = idempotent ? retryDelay({ networkError: true }, attempt, this.#policy) : null;
        if (delay === null) throw read;
        await sleep(delay);
        continue;
      }
      try {
        text = await response.text();
      } catch {
        text = "";
      }
      const error = apiError(response, parseJson(text));
      if (answerLost && options.afterLostAnswer) {
        const result = options.afterLostAnswer(error);
        if (result !== undefined) return result;
      }
      if (error.status >= 500) answerLost = true;
      const delay = retryDelay({ status: error.status, retryAfter: error.retryAfter }, attempt, this.#policy);
      if (delay === null) throw error;
      await sleep(delay);
    }
  }
}

interface RequestOptions<T> {
  query?: Query;
  body?: unknown;
  /** Whether the answer's body is the call's: checked on the parsed JSON object. */
  valid: (answer: Record<string, unknown>) => boolean;
  /** Whether repeating the call is harmless (default true); decides the retry of an unreadable 2xx. */
  idempotent?: boolean;
  afterLostAnswer?: (error: ApiError) => T | undefined;
}

/** The parsed body of a 2xx, or why it cannot be used. */
async function readAnswer(
  response: Response,
  valid: RequestOptions<unknown>["valid"],
): Promise<unknown | InvalidResponseError> {
  let text: string;
  try {
    text = await response.text();
  } catch (cause) {
    return new InvalidResponseError(response.status, `The ${response.status} answer could not be read.`, {
      cause,
    });
  }
  const parsed = parseJson(text);
  if (
    typeof parsed !== "object" ||
    parsed === null ||
    Array.isArray(parsed) ||
    !valid(parsed as Record<string, unknown>)
  ) {
    return new InvalidResponseError(
      response.status,
      `The ${response.status} answer is not the expected JSON (${text.length} characters).`,
    );
  }
  return parsed;
}

function queryString(query: Query | undefined): string {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value !== undefined) params.set(name, String(value));
  const text = params.toString();
  return text ? `?${text}` : "";
}

function parseJson(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The spec's error body `{error, retryAfter?}`; a body that is not one (a proxy's page) still gives an error. */
function apiError(response: Response, body: unknown): ApiError {
  const fields = typeof body === "object" && body !== null ? (body as Record<string, unknown>) : {};
  const message = typeof fields.error === "string" ? fields.error : `HTTP ${response.status}`;
  let retryAfter: number | undefined;
  if (response.status === 429) {
    const fromBody = fields.retryAfter;
    const header = response.headers.get("retry-after");
    const fromHeader = header === null || header.trim() === "" ? Number.NaN : Number(header);
    if (typeof fromBody === "number" && Number.isFinite(fromBody)) retryAfter = fromBody;
    else if (Number.isFinite(fromHeader) && fromHeader >= 0) retryAfter = fromHeader;
  }
  const conflict =
    response.status === 409 ? (response.headers.get("x-botdir-conflict") ?? undefined) : undefined;
  return new ApiError(response.status, message, { retryAfter, body, conflict });
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
