// Builds the published package into dist/:
//   index.js (ESM) and index.cjs (CommonJS): esbuild bundles of src/, with no import left but
//   relative ones (the package has no runtime dependency; a bare import fails the build);
//   *.d.ts and *.d.cts: the declarations, with the contract's types written out in full.
//
// Why TypeScript 5 here: the repository compiles with TypeScript 7 (the native compiler), which
// has no stable JavaScript API, and the declarations need one. The SDK's types come from
// @botdir/schema's zod contract (`z.infer`); emitted as they are written, they would import the
// contract and zod, which the published package must not depend on. Declaration bundlers
// (rollup-plugin-dts, dts-bundle-generator, api-extractor) inline declarations but never resolve
// a type, so `z.infer<typeof X>` would stay a zod type. This script asks the TypeScript 5 type
// checker (devDependency `typescript5`, an alias of typescript@5, used by this build only) for the
// resolved shape of every type in src/contract.ts and writes that shape into contract.d.ts; the
// other files' declarations are emitted as usual. The result is checked: it must compile on its
// own with no @botdir/schema and no zod in reach.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import ts from "typescript5";

const root = fileURLToPath(new URL("..", import.meta.url));
const src = path.join(root, "src");
const dist = path.join(root, "dist");

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

/** esbuild: every import must be relative (type-only imports are erased before this check). */
const noDependencies = {
  name: "no-dependencies",
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, (args) => {
      if (args.kind === "dynamic-import") return { external: true }; // node:crypto on Node 18 only
      return { errors: [{ text: `${args.path}: the SDK has no runtime dependencies` }] };
    });
  },
};
for (const [format, file] of [
  ["esm", "index.js"],
  ["cjs", "index.cjs"],
]) {
  await build({
    entryPoints: [path.join(src, "index.ts")],
    outfile: path.join(dist, file),
    bundle: true,
    format,
    platform: "neutral",
    target: "es2022",
    plugins: [noDependencies],
    logLevel: "warning",
  });
}

const options = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
  types: [],
  strict: true,
  noUncheckedIndexedAccess: true,
  verbatimModuleSyntax: true,
  skipLibCheck: true,
  declaration: true,
  emitDeclarationOnly: true,
  outDir: dist,
  rootDir: src,
};

const program = ts.createProgram([path.join(src, "index.ts")], options);
const inSrc = (file) => path.resolve(file).startsWith(src + path.sep) && !file.endsWith(".test.ts");
fail(ts.getPreEmitDiagnostics(program).filter((d) => !d.file || inSrc(d.file.fileName)));

const declarations = new Map();
const emitted = program.emit(
  undefined,
  (file, text) => {
    if (path.resolve(file).startsWith(dist + path.sep)) declarations.set(file, text);
  },
  undefined,
  true,
);
fail(emitted.diagnostics);

declarations.set(path.join(dist, "contract.d.ts"), contractDeclarations(program));

for (const [file, text] of declarations) {
  writeFileSync(file, text);
  // The CommonJS entry's types: the same declarations as .d.cts, importing each other as .cjs.
  writeFileSync(
    file.replace(/\.d\.ts$/, ".d.cts"),
    text.replace(/(from\s+["']\.\/[^"']+)\.js(["'])/g, "$1.cjs$2"),
  );
}

checkSelfContained();
process.stdout.write(
  `built ${path.relative(process.cwd(), dist)}: index.js, index.cjs, ${declarations.size} declaration files (.d.ts and .d.cts)\n`,
);

/** contract.d.ts: each exported type alias of src/contract.ts as the shape the checker resolves. */
function contractDeclarations(prog) {
  const checker = prog.getTypeChecker();
  const file = prog.getSourceFile(path.join(src, "contract.ts"));
  const printer = ts.createPrinter({ newLine: ts.NewLineKind.LineFeed });
  const flags =
    ts.NodeBuilderFlags.NoTruncation |
    ts.NodeBuilderFlags.InTypeAlias |
    ts.NodeBuilderFlags.MultilineObjectLiterals |
    ts.NodeBuilderFlags.IgnoreErrors;
  const out = [
    "// The contract's types (@botdir/schema, zod) as resolved by the TypeScript checker at build time.",
    "",
  ];
  for (const statement of file.statements) {
    if (!ts.isTypeAliasDeclaration(statement)) continue;
    const symbol = checker.getSymbolAtLocation(statement.name);
    const type = checker.getDeclaredTypeOfSymbol(symbol);
    const node = checker.typeToTypeNode(type, undefined, flags);
    const shape = printer.printNode(ts.EmitHint.Unspecified, node, file);
    if (/\bimport\(|\bz\.|\$Zod|\bcore\./.test(shape)) {
      throw new Error(`contract type ${statement.name.text} did not resolve to a plain shape: ${shape}`);
    }
    const doc = ts
      .getJSDocCommentsAndTags(statement)
      .map((d) => d.getText(file))
      .join("\n");
    out.push(`${doc ? `${doc}\n` : ""}export type ${statement.name.text} = ${shape};`, "");
  }
  return out.join("\n");
}

/** The written declarations compile alone: nothing of the workspace (schema, zod) in reach. */
function checkSelfContained() {
  const host = ts.createCompilerHost({});
  const check = ts.createProgram(
    [path.join(dist, "index.d.ts"), path.join(dist, "index.d.cts")],
    {
      ...options,
      declaration: false,
      emitDeclarationOnly: false,
      noEmit: true,
      skipLibCheck: false,
      noResolve: false,
      // Resolve nothing outside dist/.
      typeRoots: [],
      paths: {},
    },
    host,
  );
  const diagnostics = ts.getPreEmitDiagnostics(check);
  const outside = check
    .getSourceFiles()
    .filter((f) => !f.fileName.startsWith(dist) && !check.isSourceFileDefaultLibrary(f));
  fail(diagnostics);
  if (outside.length)
    throw new Error(`declarations reach outside dist/: ${outside.map((f) => f.fileName).join(", ")}`);
}

function fail(diagnostics) {
  if (!diagnostics.length) return;
  const text = ts.formatDiagnosticsWithColorAndContext(diagnostics, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => root,
    getNewLine: () => "\n",
  });
  process.stderr.write(text);
  process.exit(1);
}
