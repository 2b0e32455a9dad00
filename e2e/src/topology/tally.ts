/** Counts of what the clients of the topology suite saw, per kind of request. */
import type { Outcome } from "./balancer.js";

export interface Tally {
  sent: number;
  statuses: Map<number, number>;
  refused: number;
  /** Resets on a keep-alive connection the app had accepted earlier / on a new connection. */
  resetsReused: number;
  resetsNew: number;
  timeouts: number;
  errors: Map<string, number>;
  /** Answers 500 or above, first few kept for the report. */
  serverErrors: { at: number; status: number; body: string; replica: string }[];
  /** When and where connections were reset, first few kept for the report. */
  resetSamples: { at: number; replica: string; code: string; reused: boolean }[];
  /** Answer times (ms) of every answered request. */
  answerMs: number[];
  /** Sends skipped because too many requests of this kind were already in flight. */
  skipped: number;
  /** When each skipped send was due (ms from the load's start). */
  skippedAt: number[];
}

export function newTally(): Tally {
  return {
    sent: 0,
    statuses: new Map(),
    refused: 0,
    resetsReused: 0,
    resetsNew: 0,
    timeouts: 0,
    errors: new Map(),
    serverErrors: [],
    resetSamples: [],
    answerMs: [],
    skipped: 0,
    skippedAt: [],
  };
}

export function record(tally: Tally, outcome: Outcome, at: number): void {
  tally.sent++;
  switch (outcome.kind) {
    case "answered":
      tally.answerMs.push(outcome.ms);
      tally.statuses.set(outcome.status, (tally.statuses.get(outcome.status) ?? 0) + 1);
      if (outcome.status >= 500) {
        tally.serverErrors.push({
          at,
          status: outcome.status,
          body: outcome.body.slice(0, 200),
          replica: outcome.replica,
        });
      }
      return;
    case "refused":
      tally.refused++;
      return;
    case "reset":
      if (tally.resetSamples.length < 20)
        tally.resetSamples.push({ at, replica: outcome.replica, code: outcome.code, reused: outcome.reused });
      if (outcome.reused) tally.resetsReused++;
      else tally.resetsNew++;
      return;
    case "timeout":
      tally.timeouts++;
      return;
    case "error":
      tally.errors.set(outcome.code, (tally.errors.get(outcome.code) ?? 0) + 1);
  }
}

export const count = (tally: Tally, status: number): number => tally.statuses.get(status) ?? 0;

/** e.g. `200: 5990, 429: 3` */
export function statusList(tally: Tally): string {
  return [...tally.statuses]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${status}: ${n}`)
    .join(", ");
}

export function failures(tally: Tally): number {
  let errors = 0;
  for (const n of tally.errors.values()) errors += n;
  return tally.refused + tally.resetsReused + tally.resetsNew + tally.timeouts + errors;
}

/** The `p`th percentile (0–100) of the answer times, ms. */
export function percentile(tally: Tally, p: number): number {
  const sorted = [...tally.answerMs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}
