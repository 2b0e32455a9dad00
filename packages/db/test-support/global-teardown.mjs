import pg from "pg";
import { stopContainers } from "./containers.mjs";
import { withDatabase } from "./global-setup.mjs";

export default async function globalTeardown() {
  const url = process.env.TEST_DATABASE_URL;
  const runId = process.env.TEST_RUN_ID;
  if (url && runId) {
    const client = new pg.Client({ connectionString: withDatabase(url, "postgres") });
    await client.connect();
    try {
      const { rows } = await client.query(
        "SELECT datname FROM pg_database WHERE datname = $1 OR datname LIKE $2",
        [`botdir_tpl_${runId}`, `botdir\\_t\\_${runId}\\_%`],
      );
      for (const { datname } of rows) {
        await client.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => {});
      }
    } finally {
      await client.end();
    }
  }
  await stopContainers();
}
