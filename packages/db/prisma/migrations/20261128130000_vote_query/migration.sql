-- The vote page's query string (docs/webhooks.md "The request"): the site may pass a flat map of
-- strings when it casts a vote, and `vote.create` carries it as `query`. It is kept with the vote,
-- not the delivery, so a vote recorded while the webhook was disabled still carries it when a
-- recovery sends it. NULL when none was given (no rewrite of the table, no bytes in the row).
ALTER TABLE "vote_log" ADD COLUMN "query" JSONB;
