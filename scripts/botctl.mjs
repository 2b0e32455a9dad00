// `pnpm botctl …`: the operator CLI (apps/vote-ingest/src/cli/botctl.ts), with the repo's .env.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { loadDotEnv } from "./dotenv.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
loadDotEnv(`${root}/.env`);
const cli = `${root}/apps/vote-ingest/src/cli/botctl.ts`;
const result = spawnSync(process.execPath, ["--import", "tsx", cli, ...process.argv.slice(2)], {
  stdio: "inherit",
  env: process.env,
});
process.exit(result.status ?? 1);
