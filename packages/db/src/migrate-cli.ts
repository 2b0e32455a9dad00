// `pnpm --filter @botdir/db migrate`: applies pending migrations to DATABASE_DIRECT_URL, or to
// DATABASE_URL when that is unset (the runner holds a session advisory lock, which a
// transaction-pooling PgBouncer cannot keep).
import { migrationUrl } from "./defaults.js";
import { migrate } from "./migrate.js";

const url = migrationUrl(process.env);
const name = process.env.DATABASE_DIRECT_URL ? "DATABASE_DIRECT_URL" : "DATABASE_URL";
// libpq's multi-host form (the apps' env check refuses it with the same line): node-postgres
// would stop here with "Invalid URL".
if (!/^postgres(?:ql)?:\/\/[^\s]+$/.test(url) || !URL.canParse(url)) {
  console.error(`migrate: ${name} must be a postgresql:// URL`);
  process.exit(1);
}
const hosts = /^postgres(?:ql)?:\/\/([^/?#]*)/.exec(url)?.[1]?.split("@").at(-1) ?? "";
const query = new URLSearchParams(url.split("?")[1] ?? "");
if (hosts.includes(",") || (query.get("host") ?? "").includes(",") || query.has("target_session_attrs")) {
  console.error(
    `migrate: ${name} names several hosts (libpq multi-host), which node-postgres cannot use: point it at one address the failover moves (a PgBouncer entry repointed by RELOAD, or a DNS name), see docs/scaling.md Failover`,
  );
  process.exit(1);
}
try {
  const result = await migrate(url);
  console.log(
    JSON.stringify({ migrations: { applied: result.applied, alreadyApplied: result.alreadyApplied.length } }),
  );
} catch (error) {
  console.error(`migrate: ${(error as Error).message}`);
  process.exit(1);
}
