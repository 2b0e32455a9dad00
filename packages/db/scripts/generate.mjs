// Runs `prisma generate`. Generating the client needs no schema engine, but the Prisma CLI tries
// to download one when it is missing, which fails on machines that only reach the npm registry.
// Point it at a stub unless the operator provides a real binary; migrations do not use it
// (they run through src/migrate.ts).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const stub = fileURLToPath(new URL("./no-schema-engine.sh", import.meta.url));
const env = { ...process.env, PRISMA_HIDE_UPDATE_MESSAGE: "1" };
env.PRISMA_SCHEMA_ENGINE_BINARY ??= stub;
const result = spawnSync("prisma", ["generate"], { stdio: "inherit", env, shell: false });
process.exit(result.status ?? 1);
