/**
 * Test support shared by every package's tests: loggers that print nothing, a Redis connection that
 * is ready before it is used, and polling for a positive signal with a deadline.
 */
import { Redis, type RedisOptions } from "ioredis";
import type { Logger } from "./http.js";
import type { RedisClient } from "./redis.js";

/** A logger that drops every line. */
export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

export interface LoggedLine {
  level: "info" | "warn" | "error";
  obj: object;
  msg: string | undefined;
}

/** A logger that keeps its lines, to assert on what was (not) logged. */
export function capturingLogger(): Logger & { lines: LoggedLine[] } {
  const lines: LoggedLine[] = [];
  return {
    lines,
    info: (obj, msg) => void lines.push({ level: "info", obj, msg }),
    warn: (obj, msg) => void lines.push({ level: "warn", obj, msg }),
    error: (obj, msg) => void lines.push({ level: "error", obj, msg }),
  };
}

/**
 * Polls `probe` every `everyMs` until it returns a truthy value, and returns it; throws after
 * `timeoutMs` (generous: a loaded machine is slow, and a deadline only bounds a failure).
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  what: string,
  timeoutMs = 15_000,
  everyMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : "";
      throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Resolves once `client` is ready for commands (its `ready` event); throws after `timeoutMs`. */
export async function redisReady(client: RedisClient, timeoutMs = 15_000): Promise<void> {
  if (client.status === "ready") return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off("ready", onReady);
      reject(new Error(`Redis connection not ready after ${timeoutMs} ms (status ${client.status})`));
    }, timeoutMs);
    const onReady = () => {
      clearTimeout(timer);
      resolve();
    };
    client.once("ready", onReady);
  });
}

/**
 * A single-server connection to `url` that is ready before it is returned; connection errors are
 * listened to (the client reconnects by itself), so a test that stops Redis gets no unhandled event.
 */
export async function connectRedis(url: string, options: RedisOptions = {}): Promise<Redis> {
  const client = new Redis(url, options);
  client.on("error", () => {});
  await redisReady(client);
  return client;
}
