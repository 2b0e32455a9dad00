/**
 * The API's spans below the request's server span (docs/tracing.md): the limiter's Redis call and
 * the PostgreSQL statements, as CLIENT spans — except on `GET /check`, the hottest path, whose
 * server span is its only one (its two children cost more than half of what recording a `/check`
 * costs: docs/performance.md "Instructions per request"); app.ts hands its route the limiter and
 * the read without these wrappers. The statements are shared by the requests of one event-loop
 * turn (createBatcher), so each span is this request's wait for its batch. Where nothing is
 * exported (decided by startTelemetry, before the app is built) these spans are never made, so the
 * limiter and the statements are returned as they are: no wrapper on the hot paths.
 */
import type { Batched } from "@botdir/batcher";
import { inSpan, SpanKind, tracesExported } from "@botdir/service-kit";
import type { RateLimiter } from "./services/ratelimit.js";

const REDIS = { "db.system.name": "redis" } as const;
const POSTGRES = { "db.system.name": "postgresql" } as const;

/**
 * The limiter with a `redis.rate_limit` span around each decision (the decision as an attribute).
 * `/check`'s route is given the limiter itself (app.ts).
 */
export function traceLimiter(limiter: RateLimiter): RateLimiter {
  if (!tracesExported()) return limiter;
  const span = <D extends { kind: string }>(endpoint: string, run: () => Promise<D>) =>
    inSpan(
      "redis.rate_limit",
      { kind: SpanKind.CLIENT, attributes: { ...REDIS, "botdir.endpoint": endpoint }, leaf: true },
      async (s) => {
        const decision = await run();
        s.setAttribute("botdir.rate_limit", decision.kind);
        return decision;
      },
    );
  return {
    consume: (endpoint, key, existing) => span(endpoint, () => limiter.consume(endpoint, key, existing)),
    consumeExisting: (endpoint, key) => span(endpoint, () => limiter.consumeExisting(endpoint, key)),
  };
}

/** A batched statement with a `pg.<operation>` span around each caller's wait. */
export function traceStatement<K, V>(operation: string, batched: Batched<K, V>): Batched<K, V> {
  if (!tracesExported()) return batched;
  const name = `pg.${operation}`;
  const attributes = { ...POSTGRES, "db.operation.name": operation };
  return (key) => inSpan(name, { kind: SpanKind.CLIENT, attributes, leaf: true }, () => batched(key));
}
