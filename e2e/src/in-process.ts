/**
 * The API and vote-ingest built in-process on a test's stores (useStores/startStores): the stores'
 * database and Redis (the API's keys under the stores' prefix), the system clock and a silent
 * logger, unless `deps` gives others.
 */
import { systemClock } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import type { Express } from "express";
import { type ApiApp, createApp as createApi } from "../../apps/api/src/app.js";
import type { ApiDeps } from "../../apps/api/src/deps.js";
import { createApp as createIngest } from "../../apps/vote-ingest/src/app.js";
import type { IngestDeps } from "../../apps/vote-ingest/src/deps.js";
import type { TestStores } from "./stack.js";

export function apiOn(stores: TestStores, deps: Partial<ApiDeps> = {}): ApiApp {
  return createApi({
    db: stores.db,
    redis: stores.redis,
    clock: systemClock,
    logger: silentLogger,
    redisPrefix: stores.prefix,
    ...deps,
  });
}

export function ingestOn(
  stores: TestStores,
  deps: Partial<IngestDeps> & Pick<IngestDeps, "internalApiKey">,
): Express {
  return createIngest({
    db: stores.db,
    redis: stores.redis,
    clock: systemClock,
    logger: silentLogger,
    ...deps,
  });
}
