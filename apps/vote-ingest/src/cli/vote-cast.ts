/**
 * `botctl vote cast <botId> <userId>`: the same service function as POST /internal/v1/votes, so
 * the vote is written and its delivery handed off (or left to the relay) exactly as for the site.
 */
import type { Db } from "@botdir/db";
import { type Clock, type Logger, systemClock } from "@botdir/service-kit";
import { type CastVoteResult, createVotes } from "../services/votes.js";
import { quiet, withCliQueue } from "./cli-queue.js";

export interface VoteCastCliDeps {
  db: Db;
  redisUrl: string;
  /** REDIS_CLUSTER_NODES: the queue is on a Redis Cluster. */
  redisClusterNodes?: string | undefined;
  /** BullMQ key prefix; DEFAULT_QUEUE_PREFIX outside tests. */
  queuePrefix?: string;
  clock?: Clock;
  logger?: Logger;
}

/** Casts one vote; ids are already validated. Throws the service's ApiError on 404/409. */
export async function castVoteFromCli(
  deps: VoteCastCliDeps,
  botId: string,
  userId: string,
): Promise<CastVoteResult> {
  const logger = deps.logger ?? quiet;
  // Fail fast like the app: a Redis outage must not block the vote; the relay hands off later.
  return withCliQueue({ ...deps, logger }, async (deliveryQueue) => {
    const votes = createVotes({ db: deps.db, clock: deps.clock ?? systemClock, logger, deliveryQueue });
    const { vote, nextVoteAt } = await votes.castVote(botId, userId);
    return { vote, nextVoteAt };
  });
}
