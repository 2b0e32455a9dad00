// `pnpm build` (turbo `build` of a package): bundles the package's entry points into dist/ with
// esbuild — what the images run (`node dist/main.js`). Run in the package's directory with
// `name=entry` arguments, e.g. `node ../../scripts/build-app.mjs main=src/main.ts`.
//
// The bundle holds the app's own code, the workspace packages (which export TypeScript source),
// the generated Prisma client and the npm dependencies: dist/ is self-contained (no node_modules,
// no TypeScript tooling, no workspace links). pino's transport (pino-pretty in a terminal outside
// production, see loggerOptions) runs in a worker thread that loads files by path, so those files
// are bundled as entry points of their own and pino finds them through
// globalThis.__bundlerPathsOverrides (pino's documented hook for bundlers).
// Why esbuild and what it measures: docs/operations.md ("Build and image").
import { copyFileSync, mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { build } from "esbuild";

/** The lowest Node line that runs the bundle: this machine's tests; the images run Node 24. */
export const TARGET = "node20.19";

// `--asset=<package>/<path>`: a file of an npm dependency that the app serves as is (not code it
// imports), copied to dist/assets/<file name>, where the app looks for it first
// (apps/api/src/services/docs-page.ts: the API reference page's renderer).
const ASSET_FLAG = "--asset=";
const assets = process.argv
  .slice(2)
  .filter((arg) => arg.startsWith(ASSET_FLAG))
  .map((arg) => arg.slice(ASSET_FLAG.length));
const entryPoints = Object.fromEntries(
  process.argv
    .slice(2)
    .filter((arg) => !arg.startsWith(ASSET_FLAG))
    .map((arg) => {
      const [name, entry] = arg.split("=");
      if (!name || !entry) throw new Error(`usage: build-app.mjs name=src/entry.ts …  (got "${arg}")`);
      return [name, entry];
    }),
);
if (Object.keys(entryPoints).length === 0) entryPoints.main = "src/main.ts";
const ownEntries = Object.keys(entryPoints);

// pino's worker files, when the package uses pino (the migration runner does not).
const fromHere = createRequire(path.resolve("package.json"));
const PINO_FILES = {
  "thread-stream-worker": (req) => req.resolve("thread-stream/lib/worker.js"),
  "pino-worker": () => fromPino.resolve("./lib/worker.js"),
  "pino-pretty": () => fromHere.resolve("pino-pretty"),
};
let fromPino;
try {
  fromPino = createRequire(fromHere.resolve("pino"));
  for (const [name, find] of Object.entries(PINO_FILES)) entryPoints[name] = find(fromPino);
} catch {
  fromPino = undefined;
}
const overrides = fromPino
  ? `globalThis.__bundlerPathsOverrides = { ${Object.keys(PINO_FILES)
      .map((name) => `"${name}": __fileURLToPath(new URL("./${name}.js", import.meta.url))`)
      .join(", ")} };`
  : "";

const outdir = path.resolve("dist");
rmSync(outdir, { recursive: true, force: true });
const started = performance.now();
await build({
  entryPoints,
  outdir,
  bundle: true,
  platform: "node",
  format: "esm",
  target: TARGET,
  sourcemap: "linked",
  sourcesContent: false,
  legalComments: "none",
  logLevel: "warning",
  // CommonJS dependencies inside an ES module bundle call require() and read __dirname.
  banner: {
    js: [
      'import { createRequire as __createRequire } from "node:module";',
      'import { fileURLToPath as __fileURLToPath } from "node:url";',
      "const require = __createRequire(import.meta.url);",
      "const __filename = __fileURLToPath(import.meta.url);",
      'const __dirname = __fileURLToPath(new URL(".", import.meta.url));',
      overrides,
    ].join("\n"),
  },
});
// dist/ runs on its own (the image copies only dist/): its .js files are ES modules.
mkdirSync(outdir, { recursive: true });
writeFileSync(path.join(outdir, "package.json"), `${JSON.stringify({ type: "module" })}\n`);
for (const asset of assets) {
  mkdirSync(path.join(outdir, "assets"), { recursive: true });
  copyFileSync(fromHere.resolve(asset), path.join(outdir, "assets", path.basename(asset)));
}
const sizes = ownEntries.map(
  (name) => `dist/${name}.js ${(statSync(path.join(outdir, `${name}.js`)).size / 1e6).toFixed(1)} MB`,
);
process.stdout.write(`built ${sizes.join(", ")} in ${Math.round(performance.now() - started)} ms\n`);
