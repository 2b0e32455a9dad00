/**
 * The token set's LISTEN connection through PgBouncer's session-mode entry (docs/scaling.md
 * Failover: DATABASE_DIRECT_URL names it, one RELOAD repoints it with the transaction entry): when
 * the server behind it goes away and the entry is repointed, the set reconnects through the new
 * path by itself, is fresh again, and its session shows in pg_stat_activity under its
 * application_name. The "servers" are two fault proxies in front of the test PostgreSQL; the old
 * one's connections are cut, as a killed primary's are.
 */

import { hashToken } from "@botdir/db";
import { baseDatabaseUrl, seedBot, useForFile, useTestDatabase } from "@botdir/db/testing";
import { silentLogger, waitFor } from "@botdir/service-kit/testing";
import { startFaultProxy, startPgBouncer } from "@botdir/test-stores";
import { createTokenSet, TOKEN_LISTEN_APPLICATION_NAME } from "../src/services/token-set.js";

const t = useTestDatabase();
const server = new URL(baseDatabaseUrl());
const stores = useForFile(
  "PgBouncer and two proxies",
  async () => {
    const oldPrimary = await startFaultProxy(Number(server.port || 5432));
    const newPrimary = await startFaultProxy(Number(server.port || 5432));
    const u = new URL(server.toString());
    u.host = `127.0.0.1:${oldPrimary.port}`;
    const bouncer = await startPgBouncer({
      targetUrl: u.toString(),
      sessionDatabases: { listen_session: t.name },
    });
    return { oldPrimary, newPrimary, bouncer };
  },
  async ({ oldPrimary, newPrimary, bouncer }) => {
    await bouncer.stop();
    await Promise.all([oldPrimary.close(), newPrimary.close()]);
  },
  30_000,
);

/** Sessions on the test database named like the API's LISTEN connection. */
async function listenSessions(): Promise<number> {
  const { rows } = await t.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = $2",
    [TOKEN_LISTEN_APPLICATION_NAME, t.name],
  );
  return rows[0]?.n ?? 0;
}

describe("the LISTEN connection across a repointed PgBouncer", () => {
  it("when the server behind the session entry goes away and the entry is repointed, then the set reconnects through the new one, fresh, without a restart", async () => {
    const { oldPrimary, newPrimary, bouncer } = stores;
    const tokens = createTokenSet({
      connect: () =>
        t.db.connectDedicated(bouncer.url("listen_session"), {
          applicationName: TOKEN_LISTEN_APPLICATION_NAME,
        }),
      logger: silentLogger,
      maxLagMs: 30_000,
    });
    tokens.start();
    try {
      await tokens.whenFresh();
      expect(oldPrimary.connections()).toBeGreaterThan(0);
      expect(await listenSessions()).toBe(1);

      // The failover: the entry repointed (RELOAD), the old server's connections gone.
      await bouncer.repoint("127.0.0.1", newPrimary.port);
      oldPrimary.cut();
      await waitFor(() => !tokens.isFresh(), "the set to notice", 10_000);
      const brokeAt = Date.now();
      // A token committed meanwhile is in the set once it has reloaded on the new path.
      const bot = await seedBot(t.db);
      await waitFor(() => tokens.isFresh(), "the set to be fresh again", 15_000);
      // The default reconnect delay is 1 s; a login retry of 1 s (the failover settings) at most adds one.
      expect(Date.now() - brokeAt).toBeLessThan(5_000);
      expect(newPrimary.connections()).toBeGreaterThan(0);
      expect(tokens.lookup(hashToken(bot.token as string))).toBe("present");
      await waitFor(async () => (await listenSessions()) === 1, "one LISTEN session", 10_000);
    } finally {
      await tokens.stop();
    }
  });
});
