/**
 * `pnpm release:dry`: what a release would publish, built locally into one folder: the npm tarball
 * of @botdir/sdk, the Python wheel and sdist of botdir, and SHA256SUMS over them (`sha256sum -c`
 * format). Nothing is published. The folder is gitignored (release/ by default; RELEASE_DIR here).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { REPO_ROOT } from "../src/processes.js";

let out: string;

beforeAll(() => {
  out = mkdtempSync(path.join(tmpdir(), "botdir-release-"));
});

afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

describe("pnpm release:dry", () => {
  it("when run, then one folder holds the npm tarball, the wheel and the sdist, and SHA256SUMS that verify them", () => {
    const { NODE_OPTIONS: _vm, INIT_CWD: _cwd, ...env } = process.env;
    // The SDK's dist/ as turbo built it for the test run; rebuilt only when missing.
    const built = existsSync(path.join(REPO_ROOT, "packages/sdk/dist/index.cjs"));
    const result = spawnSync("pnpm", ["release:dry"], {
      cwd: REPO_ROOT,
      env: { ...env, RELEASE_DIR: out, ...(built ? { RELEASE_DRY_SKIP_BUILD: "1" } : {}) },
      encoding: "utf8",
      timeout: 300_000,
    });
    expect({ status: result.status, stderr: result.status === 0 ? "" : result.stderr }).toEqual({
      status: 0,
      stderr: "",
    });
    const version = JSON.parse(
      readFileSync(path.join(REPO_ROOT, "packages/sdk/package.json"), "utf8"),
    ).version;
    const artifacts = [
      `botdir-sdk-${version}.tgz`,
      `botdir-${version}-py3-none-any.whl`,
      `botdir-${version}.tar.gz`,
    ];
    expect(readdirSync(out).sort()).toEqual([...artifacts, "SHA256SUMS"].sort());

    const sums = readFileSync(path.join(out, "SHA256SUMS"), "utf8").trim().split("\n");
    expect(sums.map((line) => line.split("  ")[1]).sort()).toEqual([...artifacts].sort());
    for (const line of sums) {
      const [hex, name] = line.split("  ") as [string, string];
      expect(
        createHash("sha256")
          .update(readFileSync(path.join(out, name)))
          .digest("hex"),
      ).toBe(hex);
    }
    expect(execFileSync("sha256sum", ["-c", "SHA256SUMS"], { cwd: out, encoding: "utf8" })).toMatch(/OK/);
    // The tarball is the npm package: package/package.json of @botdir/sdk, its dist inside.
    const listing = execFileSync("tar", ["-tzf", path.join(out, artifacts[0]!)], { encoding: "utf8" });
    expect(listing).toContain("package/package.json");
    expect(listing).toContain("package/dist/index.js");
    expect(result.stdout).toContain(path.join(out, artifacts[0]!));
  }, 330_000);
});
