// `pnpm release:dry`: builds what a release would publish into one folder, and publishes nothing:
// the npm tarball of @botdir/sdk (its dist/ built by turbo, packed by `pnpm pack`), the Python
// wheel and sdist of packages/sdk-python (Debian's python3 with python3-build and
// python3-hatchling: `python3 -m build --no-isolation --skip-dependency-check`, nothing from PyPI),
// and SHA256SUMS over them (`sha256sum -c SHA256SUMS` checks them). The folder is release/
// (gitignored), or RELEASE_DIR; it is emptied first.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const out = path.resolve(process.env.RELEASE_DIR ?? path.join(root, "release"));
const python = process.env.PYTHON ?? "/usr/bin/python3";

function step(label, command, args, cwd = root) {
  process.stdout.write(`[release:dry] ${label}\n`);
  const result = spawnSync(command, args, { cwd, stdio: ["ignore", "ignore", "inherit"], env: process.env });
  if (result.error || result.status !== 0) {
    process.stderr.write(`[release:dry] ${label} failed${result.error ? `: ${result.error.message}` : ""}\n`);
    process.exit(result.status || 1);
  }
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
// RELEASE_DRY_SKIP_BUILD=1 packs the dist/ already built (the e2e test does: rebuilding would
// rewrite dist/ while other suites import the SDK).
if (process.env.RELEASE_DRY_SKIP_BUILD !== "1") {
  step("building @botdir/sdk", "pnpm", [
    "exec",
    "turbo",
    "run",
    "build",
    "--filter=@botdir/sdk",
    "--output-logs=errors-only",
  ]);
}
step("packing the npm tarball", "pnpm", ["pack", "--pack-destination", out], path.join(root, "packages/sdk"));
step(
  "building the wheel and the sdist",
  python,
  ["-m", "build", "--no-isolation", "--skip-dependency-check", "--wheel", "--sdist", "--outdir", out, "."],
  path.join(root, "packages/sdk-python"),
);

const artifacts = readdirSync(out).sort();
const sums = artifacts.map((name) => {
  const hex = createHash("sha256")
    .update(readFileSync(path.join(out, name)))
    .digest("hex");
  return `${hex}  ${name}`;
});
writeFileSync(path.join(out, "SHA256SUMS"), `${sums.join("\n")}\n`);
for (const name of artifacts) process.stdout.write(`${path.join(out, name)}\n`);
process.stdout.write(`${path.join(out, "SHA256SUMS")}\n`);
