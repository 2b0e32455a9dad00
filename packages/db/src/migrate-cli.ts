// `pnpm --filter @botdir/db migrate`: applies pending migrations to DATABASE_URL.
import { DEFAULT_DATABASE_URL } from "./defaults.js";
import { migrate } from "./migrate.js";

const url = process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
try {
  const result = await migrate(url);
  console.log(
    JSON.stringify({ migrations: { applied: result.applied, alreadyApplied: result.alreadyApplied.length } }),
  );
} catch (error) {
  console.error(`migrate: ${(error as Error).message}`);
  process.exit(1);
}
