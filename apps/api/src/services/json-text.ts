/**
 * PostgreSQL's jsonb cannot hold U+0000 or unpaired UTF-16 surrogates, both of which JSON allows.
 * Finding them before the write turns what would be a 500 into a 400 naming the field.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const unstorable = (text: string) => text.includes("\0") || LONE_SURROGATE.test(text);

function describe(path: (string | number)[]): string {
  let out = "";
  for (const key of path) out += typeof key === "number" ? `[${key}]` : out ? `.${key}` : key;
  return out;
}

/** The path of the first string (value or key) that jsonb cannot store, or null. */
export function findUnstorableText(value: unknown, path: (string | number)[] = []): string | null {
  if (typeof value === "string") return unstorable(value) ? describe(path) : null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnstorableText(value[i], [...path, i]);
      if (found !== null) return found;
    }
    return null;
  }
  if (value !== null && typeof value === "object") {
    for (const [key, inner] of Object.entries(value)) {
      if (unstorable(key)) return describe(path);
      const found = findUnstorableText(inner, [...path, key]);
      if (found !== null) return found;
    }
  }
  return null;
}

/**
 * Whether a parsed JSON value nests arrays/objects deeper than `max` levels. Iterative, so a body
 * of 100 000 nested arrays cannot overflow the stack here; checked before anything recursive
 * (findUnstorableText, JSON.stringify, jsonb) sees the value.
 */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop() as [unknown, number];
    if (current === null || typeof current !== "object") continue;
    if (depth + 1 > max) return true;
    for (const inner of Object.values(current)) stack.push([inner, depth + 1]);
  }
  return false;
}
