// `pnpm --filter @botdir/db migrate`: applies pending migrations to DATABASE_DIRECT_URL, or to
// DATABASE_URL when that is unset (the runner holds a session advisory lock, which a
// transaction-pooling PgBouncer cannot keep).
import { migrationUrl } from "./defaults.js";
import { migrate } from "./migrate.js";

const url = migrationUrl(process.env);
try {
  const result = await migrate(url);
  console.log(
    JSON.stringify({ migrations: { applied: result.applied, alreadyApplied: result.alreadyApplied.length } }),
  );
} catch (error) {
  console.error(`migrate: ${(error as Error).message}`);
  process.exit(1);
}
