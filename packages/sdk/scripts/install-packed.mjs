// The SDK as an owner gets it, for the package's own test (test/package.test.ts) and the runtime
// matrix (e2e/src/runtimes, `pnpm test:runtimes`): the built dist/ packed by `pnpm pack`, then
// the tarball installed alone into an empty project outside the workspace, offline, with an npm
// cache of its own (the package has no dependencies, so nothing may come from a registry or an
// earlier download).
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const pkgDir = fileURLToPath(new URL("..", import.meta.url));

/**
 * Packs the SDK into `work` and installs the tarball into `work/app`.
 * @param {string} work an empty directory outside the workspace
 * @param {NodeJS.ProcessEnv} env the environment of pnpm and npm (without jest's NODE_OPTIONS)
 * @returns {Promise<{ tarball: string; app: string }>}
 */
export async function installPackedSdk(work, env) {
  // dist/ is turbo's `build` task (building here would rewrite dist/ while other suites that import
  // the SDK run).
  if (!existsSync(path.join(pkgDir, "dist", "index.cjs"))) {
    throw new Error(
      "packages/sdk/dist is missing: run `pnpm --filter @botdir/sdk build` (turbo's test does)",
    );
  }
  await run("pnpm", ["pack", "--pack-destination", work], { cwd: pkgDir, env });
  const file = readdirSync(work).find((f) => f.endsWith(".tgz"));
  if (!file) throw new Error(`pnpm pack left no tarball in ${work}`);
  const tarball = path.join(work, file);
  const app = path.join(work, "app");
  mkdirSync(app);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "owner-bot", private: true }));
  await run("npm", ["install", tarball, "--offline", "--no-audit", "--no-fund", "--ignore-scripts"], {
    cwd: app,
    env: { ...env, npm_config_cache: path.join(work, "npm-cache") },
  });
  return { tarball, app };
}
