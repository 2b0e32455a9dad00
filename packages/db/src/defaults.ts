export const DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/botdir";
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";
