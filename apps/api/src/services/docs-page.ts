/**
 * The API reference page (GET /docs): the OpenAPI document rendered by Redoc's standalone bundle,
 * served from this origin with everything it needs, so the page makes no request to any other
 * origin. The renderer comes from the `redoc` npm package: in a build, scripts/build-app.mjs copies
 * it to dist/assets/ (the image holds only dist/); from source it is read from node_modules.
 *
 * Two things are adjusted so the page stays on this origin under a strict Content-Security-Policy:
 * - the bundle's side-menu logo points at Redocly's CDN; that one URL is replaced by an inline
 *   image (the only remote URL the bundle loads by itself; the test in test/docs.test.ts fails on
 *   any request to another origin, so a renderer upgrade that adds one is caught);
 * - the theme names system font stacks, so no web font is fetched.
 * The init script is a file of its own (no inline script), and every asset's name carries a hash
 * of its content, so assets are cached for a year and the page for five minutes.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The renderer inside its package, and the name scripts/build-app.mjs gives it in dist/assets/. */
export const RENDERER_MODULE = "redoc/bundles/redoc.standalone.js";
const RENDERER_FILE = path.basename(RENDERER_MODULE);
const REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg";
const INLINE_LOGO = "data:image/svg+xml,%3Csvg%20xmlns=%27http://www.w3.org/2000/svg%27/%3E";

export const DOCS_PATH = "/docs";
export const DOCS_ASSETS_PATH = "/docs/assets";

/** Where Redoc fetches the document from (the same origin). */
const SPEC_URL = "/api/v1/openapi.json";

const SYSTEM_FONTS = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';
const MONO_FONTS = 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace';

/** Redoc's options (https://redocly.com/docs/redoc/config): system fonts, responses open. */
const RENDERER_OPTIONS = {
  expandResponses: "200,202",
  requiredPropsFirst: true,
  jsonSampleExpandLevel: 3,
  theme: {
    typography: {
      fontFamily: SYSTEM_FONTS,
      headings: { fontFamily: SYSTEM_FONTS },
      code: { fontFamily: MONO_FONTS },
    },
  },
};

/**
 * The page's Content-Security-Policy: scripts from this origin only (Redoc's search runs in a
 * worker it creates from a blob), the document fetched from this origin, images from here or
 * inline. Styles allow inline because Redoc (styled-components) writes its CSS into <style>
 * elements and style attributes at run time.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "worker-src blob:",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

export const PAGE_CACHE_CONTROL = "public, max-age=300";
export const ASSET_CACHE_CONTROL = "public, max-age=31536000, immutable";

export interface DocsAsset {
  body: Buffer;
  contentType: string;
}

export interface DocsPage {
  html: string;
  /** By file name under /docs/assets/. */
  assets: Map<string, DocsAsset>;
}

/** dist/assets/<file> next to the bundled main.js, else the package in node_modules. */
function rendererPath(): string {
  const bundled = fileURLToPath(new URL(`./assets/${RENDERER_FILE}`, import.meta.url));
  if (existsSync(bundled)) return bundled;
  return createRequire(import.meta.url).resolve(RENDERER_MODULE);
}

function hashedName(base: string, ext: string, body: Buffer): string {
  return `${base}.${createHash("sha256").update(body).digest("hex").slice(0, 16)}${ext}`;
}

let built: DocsPage | undefined;

/** Reads the renderer once per process (throws at start-up when a build left it out). */
export function docsPage(): DocsPage {
  if (built) return built;
  const renderer = Buffer.from(readFileSync(rendererPath(), "utf8").replaceAll(REMOTE_LOGO, INLINE_LOGO));
  const init = Buffer.from(
    `"use strict";\nRedoc.init(${JSON.stringify(SPEC_URL)}, ${JSON.stringify(RENDERER_OPTIONS)}, document.getElementById("redoc"));\n`,
  );
  const js = "text/javascript; charset=utf-8";
  const rendererName = hashedName("redoc.standalone", ".js", renderer);
  const initName = hashedName("init", ".js", init);
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Bot Listing Directory API reference</title>
<link rel="icon" href="data:,">
</head>
<body>
<div id="redoc"></div>
<script src="${DOCS_ASSETS_PATH}/${rendererName}"></script>
<script src="${DOCS_ASSETS_PATH}/${initName}"></script>
</body>
</html>
`;
  built = {
    html,
    assets: new Map([
      [rendererName, { body: renderer, contentType: js }],
      [initName, { body: init, contentType: js }],
    ]),
  };
  return built;
}
