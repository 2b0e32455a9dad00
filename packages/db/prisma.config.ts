import { defineConfig } from "prisma/config";

// The CLI (migrate, generate) reads the URL here; the apps connect through the pg driver adapter.
// `prisma generate` needs no database, so a fresh clone generates without DATABASE_URL.
export default defineConfig({
  schema: "prisma/schema.prisma",
  migrations: { path: "prisma/migrations" },
  datasource: {
    url: process.env.DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/botdir",
  },
});
