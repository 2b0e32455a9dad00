// Dependency check, run by `pnpm lint` (and so by CI). Fails (exit 1, one line per finding) on:
// - an import circle between files of one package (type-only imports count: they are how the
//   circles used to form, through an app's deps type);
// - a workspace package importing a workspace package of its own layer or a higher one
//   (apps → kits → contract, never back);
// - packages/schema importing anything but zod (the contract must not pull in a runtime);
// - a bare import of a package that the importing package's package.json does not declare;
// - a declared dependency that no file of its package imports (tools run by scripts are listed
//   in TOOLS below).
// Usage: node scripts/check-deps.mjs [workspace root]   (default: the repository)
import fs from "node:fs";
import { builtinModules } from "node:module";
import path from "node:path";

const root = path.resolve(process.argv[2] ?? path.join(import.meta.dirname, ".."));

/** Layers: a package may import packages of a lower layer only. */
const LAYERS = [
  // The contract and leaf libraries; test-stores (private stores for the suites) is a leaf too.
  ["@botdir/schema", "@botdir/signing", "@botdir/batcher", "@botdir/test-stores"],
  // The SDK imports the contract for its types only (its build writes them out; it is published
  // with no dependencies), so it sits above the contract, below the apps that use it in examples.
  ["@botdir/db", "@botdir/service-kit", "@botdir/webhook-targets", "@botdir/sdk"], // kits
  ["@botdir/api", "@botdir/vote-ingest", "@botdir/webhook-dispatcher"], // apps
  ["@botdir/e2e", "@botdir/bench"], // suites that run the apps
];
const layerOf = (name) => LAYERS.findIndex((names) => names.includes(name));

/** Packages used by scripts, configs or the runtime, not by an import in source. */
const TOOLS = new Set([
  "tsx",
  "prisma",
  "@prisma/client", // imported by the generated client (src/generated, not scanned)
  "pino-pretty",
  "redoc", // its standalone bundle is a file the API serves at /docs (services/docs-page.ts)
  "testcontainers",
  "@types/express",
  "@types/pg",
  "@types/supertest",
  "@types/autocannon",
  "typescript",
  "typescript5", // the SDK's declaration build (packages/sdk/scripts/build.mjs)
  "publint", // run on the SDK's packed tarball (packages/sdk/test/package.test.ts)
  "@arethetypeswrong/cli", // likewise
  // Imported by the module name an object's apiVersion gives, and type-checked against by tsc
  // (e2e/src/manifests.ts, the Kubernetes manifest check).
  "kubernetes-models",
  "@kubernetes-models/keda",
  "@kubernetes-models/prometheus-operator",
]);
const BUILTINS = new Set(builtinModules);
const rootManifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
/** The root package's dependencies (jest, fast-check, tsx …): shared test and build tooling. */
const ROOT_DEV = new Set([
  ...Object.keys(rootManifest.dependencies ?? {}),
  ...Object.keys(rootManifest.devDependencies ?? {}),
]);

function workspacePackages() {
  const dirs = [];
  for (const group of ["apps", "packages"]) {
    const base = path.join(root, group);
    if (!fs.existsSync(base)) continue;
    for (const name of fs.readdirSync(base)) dirs.push(path.join(base, name));
  }
  for (const single of ["e2e", "bench"]) dirs.push(path.join(root, single));
  return dirs
    .filter((dir) => fs.existsSync(path.join(dir, "package.json")))
    .map((dir) => ({ dir, manifest: JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) }));
}

function sourceFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      if (entry.name === "node_modules" || entry.name === "generated" || entry.name === "dist") continue;
      const full = path.join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (/\.(ts|mts|mjs|js)$/.test(entry.name) && !entry.name.endsWith(".d.ts")) out.push(full);
    }
  };
  walk(dir);
  return out;
}

const IMPORT =
  /(?:^|[\s;])(?:import|export)\s+(?:type\s+)?(?:[^'"`;]*?\s+from\s+)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;

function importsOf(file) {
  const text = fs
    .readFileSync(file, "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/^\s*\/\/.*$/gm, "");
  return [...text.matchAll(IMPORT)].map((m) => m[1] ?? m[2]);
}

function resolveRelative(from, spec) {
  const base = path.resolve(path.dirname(from), spec);
  const candidates = [
    base,
    base.replace(/\.js$/, ".ts"),
    base.replace(/\.mjs$/, ".mts"),
    `${base}.ts`,
    path.join(base, "index.ts"),
  ];
  return candidates.find((c) => fs.existsSync(c) && fs.statSync(c).isFile());
}

const packageName = (spec) =>
  spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0];

/** Strongly connected components with more than one file (Tarjan), each one circle. */
function circles(graph) {
  let index = 0;
  const stack = [];
  const meta = new Map();
  const found = [];
  const visit = (v) => {
    meta.set(v, { index, low: index, onStack: true });
    index++;
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!meta.has(w)) {
        visit(w);
        meta.get(v).low = Math.min(meta.get(v).low, meta.get(w).low);
      } else if (meta.get(w).onStack) {
        meta.get(v).low = Math.min(meta.get(v).low, meta.get(w).index);
      }
    }
    if (meta.get(v).low === meta.get(v).index) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        meta.get(w).onStack = false;
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? new Set()).has(v)) found.push(component);
    }
  };
  for (const v of graph.keys()) if (!meta.has(v)) visit(v);
  return found;
}

const problems = [];
const rel = (f) => path.relative(root, f);

for (const { dir, manifest } of workspacePackages()) {
  const name = manifest.name;
  const declared = new Set([
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.devDependencies ?? {}),
    ...Object.keys(manifest.peerDependencies ?? {}),
  ]);
  const used = new Set();
  const graph = new Map();
  for (const file of sourceFiles(dir)) {
    const edges = new Set();
    graph.set(file, edges);
    for (const spec of importsOf(file)) {
      if (spec.startsWith(".")) {
        const target = resolveRelative(file, spec);
        if (target) edges.add(target);
        continue;
      }
      if (spec.startsWith("node:") || BUILTINS.has(spec)) continue;
      const dep = packageName(spec);
      used.add(dep);
      if (name === "@botdir/schema" && dep !== "zod") {
        problems.push(`${rel(file)}: packages/schema may import zod only, not ${dep}`);
      }
      if (dep.startsWith("@botdir/") && dep !== name) {
        const mine = layerOf(name);
        const theirs = layerOf(dep);
        if (theirs === -1) problems.push(`${rel(file)}: ${dep} has no layer in scripts/check-deps.mjs`);
        else if (mine !== -1 && theirs >= mine) {
          problems.push(`${rel(file)}: ${name} (layer ${mine}) must not import ${dep} (layer ${theirs})`);
        }
      }
      // Test tooling lives in the root package.json and is shared by every package.
      // A type-only use of a package is declared through its @types package.
      if (!declared.has(dep) && !declared.has(`@types/${dep}`) && !ROOT_DEV.has(dep)) {
        problems.push(`${rel(file)}: imports ${dep}, which ${name} does not declare`);
      }
    }
  }
  for (const component of circles(graph)) {
    problems.push(`import circle in ${name}: ${component.map(rel).sort().join(" → ")}`);
  }
  for (const dep of declared) {
    if (!used.has(dep) && !TOOLS.has(dep) && !dep.startsWith("@types/")) {
      problems.push(`${name}: declares ${dep}, which nothing in it imports`);
    }
  }
  if (name === "@botdir/schema") {
    const runtime = Object.keys(manifest.dependencies ?? {}).filter((d) => d !== "zod");
    if (runtime.length) problems.push(`@botdir/schema: dependencies other than zod: ${runtime.join(", ")}`);
  }
}

if (problems.length) {
  for (const line of problems) process.stderr.write(`check-deps: ${line}\n`);
  process.exit(1);
}
process.stdout.write("check-deps: no import circles, layers respected, dependencies declared and used\n");
