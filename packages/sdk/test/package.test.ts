/**
 * The published package as an owner gets it: the build's dist/ packed by `pnpm pack`, the
 * ecosystem's packaging linters on the tarball (publint, @arethetypeswrong/cli), `npm publish
 * --dry-run` of it (public, MIT, the LICENSE inside, no warning; never a real publish), then an
 * install of the tarball alone into an empty directory outside the workspace (offline: the package
 * has no dependencies; scripts/install-packed.mjs, which the runtime matrix uses too) and a real use of it from `import` and from `require`, each verifying a webhook
 * signed by the dispatcher's code, and from a strict TypeScript project.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { standardHeaders } from "@botdir/signing";
import { installPackedSdk } from "../scripts/install-packed.mjs";

const run = promisify(execFile);
const pkgDir = path.resolve(import.meta.dirname, "..");
const bin = (name: string) => path.join(pkgDir, "node_modules", ".bin", name);
const { NODE_OPTIONS: _vmModules, ...env } = process.env;

let work: string;
let tarball: string;
let app: string;

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), "botdir-sdk-pack-"));
  ({ tarball, app } = await installPackedSdk(work, env));
}, 180_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("the packed @botdir/sdk", () => {
  it("when publint lints the tarball (warnings count as errors), then it finds nothing", async () => {
    const { stdout } = await run(bin("publint"), ["run", tarball, "--strict"], { cwd: work, env });
    expect(stdout).toContain("All good!");
  }, 60_000);

  it("when arethetypeswrong checks the tarball, then every resolution mode has types", async () => {
    // Exit code 1 on any problem; --format json for an exact assertion.
    const { stdout } = await run(bin("attw"), [tarball, "--format", "json"], { cwd: work, env });
    const report = JSON.parse(stdout) as { analysis: { problems: unknown[] } };
    expect(report.analysis.problems).toEqual([]);
  }, 60_000);

  it("when npm publish --dry-run takes the tarball, then it would publish it publicly, MIT-licensed, without a warning", async () => {
    // Never a real publish: --dry-run, --offline, and a placeholder token in a config file of the
    // test's own, so that npm's "requires you to be logged in" warning does not hide the others
    // (a field npm corrects, an unknown config, a missing license).
    const npmrc = path.join(work, "publish.npmrc");
    // pnpm's own settings reach this process as npm_config_* variables, which npm would warn about.
    const ownerEnv = Object.fromEntries(Object.entries(env).filter(([k]) => !/^npm_config_/i.test(k)));
    writeFileSync(npmrc, "//registry.npmjs.org/:_authToken=placeholder-never-sent\n");
    const { stdout, stderr } = await run(
      "npm",
      ["publish", tarball, "--dry-run", "--offline", "--userconfig", npmrc, "--no-update-notifier"],
      { cwd: work, env: { ...ownerEnv, npm_config_cache: path.join(work, "npm-cache") } },
    );
    const output = `${stdout}\n${stderr}`;
    expect(output.split("\n").filter((line) => /\b(warn|ERR!)\b/i.test(line))).toEqual([]);
    expect(output).toContain("with tag latest and public access (dry-run)");
    expect(output).toMatch(/^\+ @botdir\/sdk@\d+\.\d+\.\d+$/m);
    expect(output).toMatch(/npm notice [\d.]+k?B LICENSE/);

    const manifest = JSON.parse(
      readFileSync(path.join(app, "node_modules/@botdir/sdk/package.json"), "utf8"),
    );
    expect(manifest).toMatchObject({ license: "MIT", publishConfig: { access: "public" } });
    // No public home yet: the package names no repository, homepage or bug tracker.
    expect(manifest).not.toHaveProperty("repository");
    expect(manifest).not.toHaveProperty("homepage");
    expect(manifest).not.toHaveProperty("bugs");
    expect(readFileSync(path.join(app, "node_modules/@botdir/sdk/LICENSE"), "utf8")).toBe(
      readFileSync(path.join(pkgDir, "../../LICENSE"), "utf8"),
    );
  }, 60_000);

  it("when the tarball is installed into an empty directory offline, then it has no dependencies and works from import and require", async () => {
    // Only the SDK itself was installed (npm's own ".package-lock.json" aside).
    const installed = readdirSync(path.join(app, "node_modules")).filter((f) => !f.startsWith("."));
    expect(installed).toEqual(["@botdir"]);
    expect(readdirSync(path.join(app, "node_modules/@botdir"))).toEqual(["sdk"]);
    const manifest = JSON.parse(
      readFileSync(path.join(app, "node_modules/@botdir/sdk/package.json"), "utf8"),
    );
    expect(manifest.dependencies ?? {}).toEqual({});

    const secret = `whsec_${"ab12".repeat(16)}`;
    const body =
      '{"event":"vote.create","bot_id":"123456789012345678","user_id":"223456789012345678","voted_at":"2026-11-21T12:00:00.000Z"}';
    const headers = standardHeaders([secret], "d-1", new Date(), body);
    const input = JSON.stringify({ secret, body, headers });
    const use = `
      const input = JSON.parse(process.argv[2]);
      const names = ["BotDirClient", "ApiError", "startAutoposter", "verifyWebhook", "WebhookVerificationError", "expressWebhook", "nodeWebhook", "fetchWebhook", "memorySeenStore"];
      const missing = names.filter((n) => typeof sdk[n] !== "function");
      const client = new sdk.BotDirClient({ baseUrl: "http://127.0.0.1:1", token: "t", botId: "123456789012345678" });
      sdk.verifyWebhook(input).then((v) => console.log(JSON.stringify({ missing, deliveryId: v.deliveryId, user: v.event.user_id, bot: client.botId })));
    `;
    writeFileSync(path.join(app, "esm.mjs"), `import * as sdk from "@botdir/sdk";\n${use}`);
    writeFileSync(path.join(app, "cjs.cjs"), `const sdk = require("@botdir/sdk");\n${use}`);
    // Node 18 has no global Web Crypto: without it the SDK takes node:crypto's webcrypto.
    const noGlobalCrypto =
      'Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });';
    // The SDK looks for the global when it verifies, so removing it after the import is enough.
    writeFileSync(
      path.join(app, "node18.mjs"),
      `import * as sdk from "@botdir/sdk";\n${noGlobalCrypto}\n${use}`,
    );
    writeFileSync(
      path.join(app, "node18.cjs"),
      `${noGlobalCrypto}\nconst sdk = require("@botdir/sdk");\n${use}`,
    );
    for (const file of ["esm.mjs", "cjs.cjs", "node18.mjs", "node18.cjs"]) {
      const { stdout } = await run(process.execPath, [file, input], { cwd: app, env });
      expect(JSON.parse(stdout)).toEqual({
        missing: [],
        deliveryId: "d-1",
        user: "223456789012345678",
        bot: "123456789012345678",
      });
    }
  }, 120_000);

  it("when a TypeScript project uses the installed package from ESM and CommonJS, then the contract's types reach it", async () => {
    const use = `
      const client = new BotDirClient({ baseUrl: "https://botdir.example", token: "t", botId: "123456789012345678" });
      export async function perks(userId: string): Promise<string[]> {
        const check: VoteCheckResult = await client.check(userId);
        const voted: 0 | 1 = check.voted;
        const at: string | null = check.votedAt;
        // @ts-expect-error voted is 0 | 1, not any
        const wrong: string = check.voted;
        const users: string[] = [];
        for await (const vote of client.votesSince(new Date())) users.push(vote.user_id);
        const handler = fetchWebhook({ secret: "whsec_x", onVote: (vote: VoteEvent) => void users.push(vote.user_id) });
        return [String(voted), String(at), String(wrong), String(handler)];
      }
    `;
    writeFileSync(
      path.join(app, "esm.mts"),
      `import { BotDirClient, fetchWebhook, type VoteCheckResult, type VoteEvent } from "@botdir/sdk";\n${use}`,
    );
    writeFileSync(
      path.join(app, "cjs.cts"),
      `import sdk = require("@botdir/sdk");\nimport BotDirClient = sdk.BotDirClient;\nimport fetchWebhook = sdk.fetchWebhook;\ntype VoteCheckResult = sdk.VoteCheckResult;\ntype VoteEvent = sdk.VoteEvent;\n${use}`,
    );
    const tsconfig = {
      compilerOptions: {
        module: "nodenext",
        moduleResolution: "nodenext",
        target: "es2022",
        lib: ["es2022", "dom"],
        types: [],
        strict: true,
        noEmit: true,
        skipLibCheck: false,
      },
      files: ["esm.mts", "cjs.cts"],
    };
    writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(tsconfig));
    const tsc = path.join(pkgDir, "node_modules", "typescript5", "bin", "tsc");
    const result = await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: app, env }).then(
      () => "compiled",
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );
    expect(result).toBe("compiled");
  }, 60_000);
});
