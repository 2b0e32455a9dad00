/** ISO 8601 UTC with milliseconds and a Z suffix, e.g. 2026-11-21T05:00:00.000Z. */
export function toIso(date: Date): string {
  return date.toISOString();
}

export function toIsoOrNull(date: Date | null | undefined): string | null {
  return date ? date.toISOString() : null;
}
