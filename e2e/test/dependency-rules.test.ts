/**
 * scripts/check-deps.mjs (run by `pnpm lint`, so by CI): the repository passes, and a workspace
 * with an import circle, a contract that imports Express, an import against the layers or an
 * unused dependency fails with a line naming each.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const script = path.join(root, "scripts/check-deps.mjs");

function check(workspace?: string) {
  const result = spawnSync(process.execPath, [script, ...(workspace ? [workspace] : [])], {
    encoding: "utf8",
  });
  return { status: result.status, stderr: result.stderr, stdout: result.stdout };
}

function writeTree(base: string, files: Record<string, string>): void {
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(base, file)), { recursive: true });
    writeFileSync(path.join(base, file), text);
  }
}

const manifest = (name: string, dependencies: Record<string, string> = {}) =>
  JSON.stringify({ name, type: "module", dependencies });

describe("dependency rules", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), "botdir-deps-"));
    writeTree(dir, {
      "package.json": manifest("botdir"),
      "packages/schema/package.json": manifest("@botdir/schema", { zod: "*" }),
      "packages/schema/src/index.ts": 'import { z } from "zod";\nexport const Id = z.string();\n',
      "packages/service-kit/package.json": manifest("@botdir/service-kit", { "@botdir/schema": "*" }),
      "packages/service-kit/src/index.ts": 'import { Id } from "@botdir/schema";\nexport const kit = Id;\n',
      "apps/api/package.json": manifest("@botdir/api", { "@botdir/service-kit": "*" }),
      "apps/api/src/app.ts": 'import { kit } from "@botdir/service-kit";\nexport const app = kit;\n',
    });
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  test("when the repository is checked, then it passes", () => {
    const result = check();
    expect(result.stderr).toBe("");
    expect(result.status).toBe(0);
  });

  test("when the fixture follows the rules, then it passes", () => {
    expect(check(dir).status).toBe(0);
  });

  test("when two files of an app import each other (type-only included), then the circle is named", () => {
    writeTree(dir, {
      "apps/api/src/app.ts":
        'import { kit } from "@botdir/service-kit";\nimport "./routes/health.js";\nexport type Deps = { a: 1 };\nexport const app = kit;\n',
      "apps/api/src/routes/health.ts":
        'import type { Deps } from "../app.js";\nexport const d: Deps | null = null;\n',
    });
    const result = check(dir);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(
      "import circle in @botdir/api: apps/api/src/app.ts → apps/api/src/routes/health.ts",
    );
  });

  test("when the contract imports anything but zod, then it fails", () => {
    writeTree(dir, {
      "packages/schema/package.json": manifest("@botdir/schema", { zod: "*", express: "*" }),
      "packages/schema/src/http.ts": 'import express from "express";\nexport const e = express;\n',
    });
    const result = check(dir);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(
      "packages/schema/src/http.ts: packages/schema may import zod only, not express",
    );
    expect(result.stderr).toContain("@botdir/schema: dependencies other than zod: express");
  });

  test("when a kit imports an app, then the layer rule fails", () => {
    writeTree(dir, {
      "packages/service-kit/package.json": manifest("@botdir/service-kit", {
        "@botdir/schema": "*",
        "@botdir/api": "*",
      }),
      "packages/service-kit/src/up.ts": 'import { app } from "@botdir/api";\nexport const up = app;\n',
    });
    const result = check(dir);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain("@botdir/service-kit (layer 1) must not import @botdir/api (layer 2)");
  });

  test("when a dependency is declared that nothing imports, or an import is undeclared, then it fails", () => {
    writeTree(dir, {
      "apps/api/package.json": manifest("@botdir/api", { "@botdir/service-kit": "*", "left-over": "*" }),
      "apps/api/src/extra.ts": 'import { Redis } from "ioredis";\nexport const r = Redis;\n',
    });
    const result = check(dir);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain("@botdir/api: declares left-over, which nothing in it imports");
    expect(result.stderr).toContain(
      "apps/api/src/extra.ts: imports ioredis, which @botdir/api does not declare",
    );
  });
});
