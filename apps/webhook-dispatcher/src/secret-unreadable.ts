/**
 * A delivery whose webhook secret no configured key decrypts (the key that encrypted it was removed
 * from the ring, or the stored value is corrupt) cannot be signed, now or later. Giving the claim
 * back looped for ever: BullMQ retried, gave up, the outbox relay re-added the job every
 * OUTBOX_STALE_MS. Instead the claimed attempt is recorded once with error kind
 * `secret_unreadable`, the delivery ends `failed` at once, and one error line names the bot and
 * the key id the ciphertext names (when the secret box reports one), never the secret.
 */
import type { Db } from "@botdir/db";
import { type Clock, describeError, type Logger } from "@botdir/service-kit";
import type { ClaimResult, DeliveryStore } from "./deliveries.js";
import type { AttemptOutcome } from "./http-client.js";
import type { AttemptRecorder } from "./metrics.js";
import { recordDurably } from "./record-durably.js";
import type { RetryDelays } from "./schedule.js";

export interface UnreadableSecretDeps {
  db: Db;
  store: DeliveryStore;
  clock: Clock;
  logger: Logger;
  retryDelays: RetryDelays;
  metrics?: AttemptRecorder | undefined;
}

/** The key id a decryption error names (SecretUnreadable of @botdir/db carries `keyId`), or null. */
export function keyIdOf(error: unknown): string | null {
  const keyId = (error as { keyId?: unknown } | null)?.keyId;
  return typeof keyId === "string" ? keyId : null;
}

export async function recordUnreadableSecret(
  deliveryId: string,
  claim: Extract<ClaimResult, { kind: "unreadable" }>,
  deps: UnreadableSecretDeps,
): Promise<
  | { kind: "failed"; attemptNumber: number; errorKind: "secret_unreadable" }
  | { kind: "superseded"; attemptNumber: number }
> {
  const { attemptNumber, botId } = claim;
  const now = deps.clock.now();
  const outcome: AttemptOutcome = {
    ok: false,
    statusCode: null,
    errorKind: "secret_unreadable",
    durationMs: 0,
  };
  const recorded = await recordDurably(
    {
      deliveryId,
      botId,
      attemptNumber,
      leaseUntil: claim.leaseUntil,
      attemptedAt: now,
      outcome,
      now,
      retryDelays: deps.retryDelays,
      final: true,
    },
    { store: deps.store, db: deps.db, clock: deps.clock },
  );
  deps.metrics?.attempt({
    outcome: recorded.kind,
    attemptNumber,
    errorKind: outcome.errorKind,
    durationMs: 0,
    votedAt: claim.votedAt,
    recordedAt: now,
  });
  if (recorded.kind === "superseded") {
    deps.logger.warn({ deliveryId, botId, attempt: attemptNumber }, "webhook attempt outlived its claim");
    return { kind: "superseded", attemptNumber };
  }
  deps.logger.error(
    {
      deliveryId,
      botId,
      attempt: attemptNumber,
      keyId: keyIdOf(claim.error),
      errorKind: "secret_unreadable",
      err: describeError(claim.error),
    },
    "no configured encryption key decrypts the bot's webhook secret; delivery failed without a request",
  );
  return { kind: "failed", attemptNumber, errorKind: "secret_unreadable" };
}
