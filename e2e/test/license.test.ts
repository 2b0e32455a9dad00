/**
 * The project is MIT-licensed: the LICENSE at the root, and `"license": "MIT"` in the manifest of
 * the root and of every workspace package (pnpm-workspace.yaml's folders), so that nothing is
 * published or copied without it.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The root's manifest and every workspace package's, found from pnpm-workspace.yaml's globs. */
function manifests(): string[] {
  const globs = [
    ...readFileSync(path.join(root, "pnpm-workspace.yaml"), "utf8").matchAll(/^\s*-\s*"?([^"\s]+)"?/gm),
  ];
  const folders = globs.flatMap(([, glob]) => {
    if (!glob?.endsWith("/*")) return [glob ?? ""];
    const parent = glob.slice(0, -2);
    return readdirSync(path.join(root, parent)).map((name) => `${parent}/${name}`);
  });
  return ["package.json", ...folders.map((f) => `${f}/package.json`)].filter((f) =>
    existsSync(path.join(root, f)),
  );
}

describe("the license", () => {
  test("when the root is read, then LICENSE is the MIT license of the botdir contributors", () => {
    const text = readFileSync(path.join(root, "LICENSE"), "utf8");
    expect(text.split("\n")[0]).toBe("MIT License");
    expect(text).toContain("Copyright (c) 2026 The botdir contributors");
    expect(text).toContain("Permission is hereby granted, free of charge");
  });

  test("when every package.json of the workspace is read, then each says MIT", () => {
    const found = manifests();
    // The root, three apps, the packages, e2e and bench at least.
    expect(found.length).toBeGreaterThanOrEqual(13);
    const unlicensed = found.filter(
      (file) => JSON.parse(readFileSync(path.join(root, file), "utf8")).license !== "MIT",
    );
    expect(unlicensed).toEqual([]);
  });
});
