export const DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/botdir";
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";

/**
 * The variables the migration runner (`pnpm db:migrate`, the image's `migrate` entry) reads, first
 * set first: PostgreSQL itself, as its session advisory lock needs.
 */
export const MIGRATION_ENV = ["DATABASE_DIRECT_URL", "DATABASE_URL"] as const;

/** The URL migrations are applied to: the first of MIGRATION_ENV that is set, else the default. */
export function migrationUrl(env: Record<string, string | undefined>): string {
  for (const name of MIGRATION_ENV) {
    const value = env[name];
    if (value) return value;
  }
  return DEFAULT_DATABASE_URL;
}
