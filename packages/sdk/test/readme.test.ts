/**
 * Every TypeScript snippet of the README stands on its own: type-checked (strict, as an ES module
 * where top-level await is allowed) against the SDK's own source, it uses no name it does not
 * import or declare, has no `return` outside a function, and uses the SDK's API as typed. Modules
 * other than the SDK (express) are not installed here: their imports are typed `any`, so a snippet
 * is checked for its own names, not for theirs.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const ts = require("typescript5") as typeof import("typescript5");
const pkgDir = path.resolve(import.meta.dirname, "..");

function snippets(): { line: number; source: string }[] {
  const text = readFileSync(path.join(pkgDir, "README.md"), "utf8");
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((match) => ({
    line: text.slice(0, match.index).split("\n").length,
    source: match[1] ?? "",
  }));
}

/** The diagnostics of one snippet, compiled alone as `snippet.mts` beside the SDK's source. */
function diagnostics(source: string): string[] {
  const file = path.join(pkgDir, "src", "__readme_snippet__.mts");
  const options: import("typescript5").CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ["lib.es2023.d.ts", "lib.dom.d.ts", "lib.dom.asynciterable.d.ts"],
    types: ["node"],
    typeRoots: [path.resolve(pkgDir, "../../node_modules/@types")],
    skipLibCheck: true,
    noUnusedLocals: false,
  };
  const host = ts.createCompilerHost(options);
  const read = host.readFile.bind(host);
  host.readFile = (name) => (name === file ? source : read(name));
  const exists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || exists(name);
  host.resolveModuleNameLiterals = (literals, containing) =>
    literals.map((literal) => {
      if (literal.text === "@botdir/sdk") {
        return {
          resolvedModule: { resolvedFileName: path.join(pkgDir, "src", "index.ts"), extension: ".ts" },
        };
      }
      return ts.resolveModuleName(literal.text, containing, options, host);
    });
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program, program.getSourceFile(file))
    .filter((d) => d.file?.fileName === file)
    .filter((d) => d.code !== 2307 && d.code !== 7016) // a module not installed here: its names are `any`
    .map((d) => `${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`);
}

describe("the README's TypeScript snippets", () => {
  it("has snippets", () => {
    expect(snippets().length).toBeGreaterThanOrEqual(5);
  });

  it.each(snippets().map((s) => [s.line, s.source] as const))(
    "the snippet at line %i type-checks on its own",
    (_line, source) => {
      expect(diagnostics(source)).toEqual([]);
    },
    60_000,
  );
});
