/**
 * Length in characters as the chat platform counts them: Unicode code points, not UTF-16 code
 * units, so an emoji outside the BMP counts once.
 */
export function charLength(value: string): number {
  let n = 0;
  for (const _ of value) n++;
  return n;
}
