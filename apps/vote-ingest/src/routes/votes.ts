/** POST /internal/v1/votes: the site frontend casts a vote (INTERNAL_API_KEY). */
import { CastVoteBody, parseOrThrow } from "@botdir/schema";
import { methodNotAllowed, requestKeptTraceparent, requireJson, sendJson } from "@botdir/service-kit";
import express, { type Router } from "express";
import { requireInternalKey } from "../internal-auth.js";
import type { Votes } from "../services/votes.js";

export interface VotesRouteDeps {
  votes: Votes;
  internalApiKey: string;
}

export function registerVotes(router: Router, deps: VotesRouteDeps): void {
  router.post(
    "/internal/v1/votes",
    requireInternalKey(deps.internalApiKey),
    requireJson(),
    express.json({ limit: "4kb" }),
    async (req, res) => {
      const body = parseOrThrow(CastVoteBody, req.body);
      const { vote, nextVoteAt } = await deps.votes.castVote(
        body.bot_id,
        body.user_id,
        requestKeptTraceparent(res),
        body.query ?? null,
      );
      res.setHeader("Cache-Control", "no-store");
      sendJson(res, { vote, nextVoteAt }, 201);
    },
  );
  router.all("/internal/v1/votes", methodNotAllowed(["POST"]));
}
