/**
 * Seeds webhook_deliveries and webhook_attempts rows directly, as the dispatcher would write them,
 * so the attempt list can be tested without running deliveries.
 */
import { randomUUID } from "node:crypto";
import type { Db } from "@botdir/db";
import { randomUserId } from "@botdir/db/testing";

export interface SeedAttempt {
  statusCode: number | null;
  errorKind: string | null;
  /** Minutes after `base`. */
  at: number;
}

export interface SeedDelivery {
  state: "pending" | "delivered" | "failed";
  attempts: SeedAttempt[];
  /** The event the delivery carries; vote.create when not given. */
  event?: "vote.create" | "vote.available";
}

export interface SeededAttempt {
  deliveryId: string;
  attempt: number;
  statusCode: number | null;
  errorKind: string | null;
  state: "pending" | "delivered" | "failed";
  event: "vote.create" | "vote.available";
  attemptedAt: Date;
}

export async function seedDeliveries(
  db: Db,
  botId: string,
  base: Date,
  deliveries: SeedDelivery[],
): Promise<SeededAttempt[]> {
  const out: SeededAttempt[] = [];
  for (const d of deliveries) {
    const first = d.attempts[0]?.at ?? 0;
    const vote = await db.prisma.vote.create({
      data: { botId, userId: randomUserId(), votedAt: new Date(base.getTime() + first * 60_000) },
    });
    const deliveryId = randomUUID();
    await db.prisma.delivery.create({
      data: {
        id: deliveryId,
        botId,
        voteId: vote.id,
        state: d.state,
        event: d.event ?? "vote.create",
        attemptsMade: d.attempts.length,
        nextAttemptAt: base,
      },
    });
    for (const [index, a] of d.attempts.entries()) {
      const attemptedAt = new Date(base.getTime() + a.at * 60_000);
      await db.prisma.attempt.create({
        data: {
          deliveryId,
          botId,
          series: 0,
          attemptNumber: index + 1,
          statusCode: a.statusCode,
          errorKind: a.errorKind,
          durationMs: 12,
          attemptedAt,
        },
      });
      out.push({
        deliveryId,
        attempt: index + 1,
        statusCode: a.statusCode,
        errorKind: a.errorKind,
        state: d.state,
        event: d.event ?? "vote.create",
        attemptedAt,
      });
    }
  }
  return out;
}

/**
 * Five failed attempts, two of a delivered one, four of a pending one (all vote.create), and one
 * delivered vote.available: 12 in all.
 */
export const TWELVE_ATTEMPTS: SeedDelivery[] = [
  {
    state: "failed",
    attempts: [
      { statusCode: 500, errorKind: "http_status", at: 0 },
      { statusCode: 502, errorKind: "http_status", at: 1 },
      { statusCode: null, errorKind: "timeout", at: 2 },
      { statusCode: 301, errorKind: "redirect", at: 3 },
      { statusCode: 500, errorKind: "http_status", at: 4 },
    ],
  },
  {
    state: "delivered",
    attempts: [
      { statusCode: null, errorKind: "connection", at: 5 },
      { statusCode: 204, errorKind: null, at: 6 },
    ],
  },
  {
    state: "pending",
    attempts: [
      { statusCode: 503, errorKind: "http_status", at: 7 },
      { statusCode: 503, errorKind: "http_status", at: 8 },
      { statusCode: 503, errorKind: "http_status", at: 9 },
      { statusCode: 503, errorKind: "http_status", at: 10 },
    ],
  },
  { state: "delivered", event: "vote.available", attempts: [{ statusCode: 200, errorKind: null, at: 11 }] },
];

/** What the service should list for seeded attempts: newest first, at most ten. */
export function expectedList(seeded: SeededAttempt[]) {
  return [...seeded]
    .sort((a, b) => b.attemptedAt.getTime() - a.attemptedAt.getTime())
    .slice(0, 10)
    .map((a) => ({
      deliveryId: a.deliveryId,
      attempt: a.attempt,
      series: 0,
      statusCode: a.statusCode,
      errorKind: a.errorKind,
      outcome: a.errorKind === null ? "delivered" : "failed",
      deliveryState: a.state,
      attemptedAt: a.attemptedAt.toISOString(),
      // Seeded rows carry no trace (made without one, as before traces were kept).
      traceId: null,
      test: false,
      event: a.event,
      recovered: false,
    }));
}
