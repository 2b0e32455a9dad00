/**
 * The public badge: a flat SVG with the bot's server count and its votes of the last 30 days.
 * Text is measured with a fixed per-character width (Verdana 11px is close to 7px for digits and
 * lowercase), which is what badge services do without a font engine.
 */
import type { WidgetCounts } from "./bots.js";

const CHAR_WIDTH = 7;
const PADDING = 10;
const HEIGHT = 20;
const LABEL_COLOR = "#555";
const VALUE_COLOR = "#4c1";
const NEUTRAL_COLOR = "#9f9f9f";
const ERROR_COLOR = "#e05d44";

function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** 1482 -> "1,482"; fixed format, independent of the server's locale. */
export function formatCount(n: number): string {
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

interface Segment {
  text: string;
  color: string;
}

function render(segments: Segment[], title: string): string {
  let x = 0;
  const parts: string[] = [];
  const texts: string[] = [];
  for (const segment of segments) {
    const width = segment.text.length * CHAR_WIDTH + PADDING * 2;
    parts.push(`<rect x="${x}" width="${width}" height="${HEIGHT}" fill="${segment.color}"/>`);
    const center = x + width / 2;
    const text = escapeXml(segment.text);
    texts.push(`<text x="${center}" y="15" fill="#010101" fill-opacity=".3">${text}</text>`);
    texts.push(`<text x="${center}" y="14">${text}</text>`);
    x += width;
  }
  const label = escapeXml(title);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${x}" height="${HEIGHT}" role="img" aria-label="${label}">`,
    `<title>${label}</title>`,
    `<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>`,
    `<clipPath id="r"><rect width="${x}" height="${HEIGHT}" rx="3" fill="#fff"/></clipPath>`,
    `<g clip-path="url(#r)">${parts.join("")}<rect width="${x}" height="${HEIGHT}" fill="url(#s)"/></g>`,
    `<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11">${texts.join("")}</g>`,
    "</svg>",
  ].join("");
}

/** The badge of a listed bot; `counts` null gives the neutral badge (unknown, unlisted or invalid id). */
export function renderBadge(counts: WidgetCounts | null): string {
  if (counts === null) {
    return render(
      [
        { text: "bot directory", color: LABEL_COLOR },
        { text: "not listed", color: NEUTRAL_COLOR },
      ],
      "bot directory: not listed",
    );
  }
  const servers = counts.servers === null ? "n/a" : formatCount(counts.servers);
  const votes = formatCount(counts.votes);
  return render(
    [
      { text: "servers", color: LABEL_COLOR },
      { text: servers, color: VALUE_COLOR },
      { text: "votes (30d)", color: LABEL_COLOR },
      { text: votes, color: VALUE_COLOR },
    ],
    `servers: ${servers}, votes (30 days): ${votes}`,
  );
}

/**
 * The badge when the counts could not be read (database error or timeout). It says so instead of
 * guessing: a listed bot must never be shown as "not listed" because a query failed.
 */
export function renderErrorBadge(): string {
  return render(
    [
      { text: "bot directory", color: LABEL_COLOR },
      { text: "unavailable", color: ERROR_COLOR },
    ],
    "bot directory: temporarily unavailable",
  );
}
