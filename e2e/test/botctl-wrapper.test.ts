/**
 * `pnpm botctl …` goes through pnpm (the root package.json script), the repo's .npmrc
 * (reporter=silent, so pnpm prints nothing of its own) and scripts/botctl.mjs (loads .env, runs
 * the CLI). Whatever the CLI prints for `--help`, the wrapper must print exactly that — no pnpm
 * banner, no lost flag — and exit with the CLI's own status.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const cli = path.join(root, "apps/vote-ingest/src/cli/botctl.ts");

function run(command: string, args: string[]) {
  const { INIT_CWD: _cwd, npm_config_reporter: _reporter, ...env } = process.env;
  const result = spawnSync(command, args, { cwd: root, env, encoding: "utf8", timeout: 60_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe("pnpm botctl --help", () => {
  it("when run through pnpm, then it prints the CLI's usage and nothing else, with the CLI's exit status", () => {
    const direct = run(process.execPath, ["--import", "tsx", cli, "--help"]);
    const viaPnpm = run("pnpm", ["botctl", "--help"]);
    expect(direct.stdout).toMatch(/botctl bot create/);
    expect(viaPnpm.stdout).toBe(direct.stdout);
    expect(viaPnpm.stdout).not.toMatch(/^> /m); // pnpm's "> botdir@ botctl" banner
    expect(viaPnpm.status).toBe(direct.status);
    expect(viaPnpm.status).toBe(0);
    // Every command is listed.
    for (const command of [
      "webhook rotate-secret",
      "webhook test",
      "webhook redeliver",
      "webhook enable",
      "secrets reencrypt",
    ]) {
      expect(viaPnpm.stdout).toContain(`botctl ${command}`);
    }
  }, 90_000);
});
