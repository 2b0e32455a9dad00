/**
 * The API's request and response bodies as the SDK's types. They are the zod contract's inferred
 * types (`@botdir/schema`), imported for types only: the build (scripts/build.mjs) writes their
 * resolved shapes into the published declarations, so the package depends on neither the contract
 * nor zod.
 */
import type {
  Command as CommandShape,
  CommandsResponse as CommandsResponseShape,
  DeliveryAttempt as DeliveryAttemptShape,
  RecoverResponse as RecoverResponseShape,
  RecoveryResponse as RecoveryResponseShape,
  RedeliverResponse as RedeliverResponseShape,
  StatsResponse as StatsResponseShape,
  VoteAvailablePayload,
  VoteCheckResult as VoteCheckResultShape,
  VotesPage as VotesPageShape,
  VotesResponse,
  WebhookPayload,
} from "@botdir/schema";

/**
 * A command as the chat platform describes it and the server accepts it (name 1–32, description
 * 1–100; other fields kept): `description` is required except for context-menu commands (`type` 2,
 * user, and 3, message), as the contract's refinement checks; without it the server answers 400.
 */
export type Command = CommandShape & ({ description: string } | { type: 2 | 3 });
/** Answer of `putCommands`: `count` is the number of commands kept after de-duplication. */
export type CommandsResponse = CommandsResponseShape;
/** Answer of `postStats`: the count posted. */
export type StatsResponse = StatsResponseShape;
/** The spec's Vote check result. Outside the window: `voted` 0, `hasVoted` false, times null. */
export type VoteCheckResult = VoteCheckResultShape;
/** One vote of the log: user id and time (ISO 8601 UTC with milliseconds). */
export type Vote = VotesResponse["votes"][number];
/** A page of `GET /votes?since=&cursor=`, oldest first; `nextCursor` is absent on the last page. */
export type VotesPage = VotesPageShape;
/**
 * One webhook delivery attempt, as the bot's edit page lists it. `event` is the event its delivery
 * carries (`vote.create` or `vote.available`; `null` for a test event); optional, since a server
 * that does not send it answers without it.
 */
export type DeliveryAttempt = Omit<DeliveryAttemptShape, "event"> & {
  event?: DeliveryAttemptShape["event"];
};
/**
 * Answer of `redeliver`: the series just started. `series` is `null` when the answer of the attempt
 * that started it was lost (a timeout or 5xx) and the client's retry was told the delivery is
 * pending (409): the redelivery did start, its number is not known.
 */
export type RedeliverResponse = {
  deliveryId: RedeliverResponseShape["deliveryId"];
  state: RedeliverResponseShape["state"];
  series: RedeliverResponseShape["series"] | null;
};
/** Answer of `recover`: the recovery's id and the number of votes it sends again. */
export type RecoverResponse = RecoverResponseShape;
/** A recovery's progress (`recovery`): `pending` is neither delivered nor failed yet. */
export type RecoveryResponse = RecoveryResponseShape;
/** The body of a `vote.create` webhook: a vote was cast. */
export type VoteEvent = WebhookPayload;
/** The body of a `vote.available` webhook: the vote's 12-hour window ended (`available_at`). */
export type VoteAvailableEvent = VoteAvailablePayload;
/** Either vote event; `event` tells them apart. */
export type VoteWebhookPayload = VoteEvent | VoteAvailableEvent;
