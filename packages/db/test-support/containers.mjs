// testcontainers, used only when a Docker engine answers (DOCKER_HOST, or /var/run/docker.sock)
// and neither DATABASE_URL nor REDIS_URL is set. Imported lazily so machines without Docker never
// load it. TEST_POSTGRES_IMAGE and TEST_REDIS_IMAGE name other images (a host with no registry
// builds local ones: docker/local/build-bases.sh); podman's Docker-compatible socket works as
// DOCKER_HOST (pnpm test:images runs packages/db's and vote-ingest's suites that way, with
// TESTCONTAINERS_RYUK_DISABLED=true).
import { existsSync } from "node:fs";
import net from "node:net";

const KEY = Symbol.for("botdir.testcontainers");

function dockerSocket() {
  const host = process.env.DOCKER_HOST;
  if (host?.startsWith("unix://")) return host.slice("unix://".length);
  if (host) return null;
  return existsSync("/var/run/docker.sock") ? "/var/run/docker.sock" : null;
}

async function dockerAnswers() {
  if (process.env.DOCKER_HOST && !process.env.DOCKER_HOST.startsWith("unix://")) return true;
  const socket = dockerSocket();
  if (!socket) return false;
  return new Promise((resolve) => {
    const conn = net.connect(socket);
    const timer = setTimeout(() => {
      conn.destroy();
      resolve(false);
    }, 1_000);
    conn.on("connect", () => {
      clearTimeout(timer);
      conn.end();
      resolve(true);
    });
    conn.on("error", () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
}

/** @returns {Promise<{databaseUrl: string, redisUrl: string} | null>} */
export async function startContainersIfNeeded() {
  if (process.env.DATABASE_URL || process.env.REDIS_URL) return null;
  if (process.env.TEST_CONTAINERS === "0") return null;
  if (!(await dockerAnswers())) return null;
  const { GenericContainer, Wait } = await import("testcontainers");
  const postgres = await new GenericContainer(process.env.TEST_POSTGRES_IMAGE || "postgres:16-alpine")
    .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: "trust" })
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start();
  const redis = await new GenericContainer(process.env.TEST_REDIS_IMAGE || "redis:7-alpine")
    .withExposedPorts(6379)
    .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/))
    .start();
  globalThis[KEY] = [postgres, redis];
  process.stdout.write(
    `[testcontainers] PostgreSQL ${postgres.getHost()}:${postgres.getMappedPort(5432)}, Redis ${redis.getHost()}:${redis.getMappedPort(6379)}\n`,
  );
  return {
    databaseUrl: `postgresql://postgres@${postgres.getHost()}:${postgres.getMappedPort(5432)}/postgres`,
    redisUrl: `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`,
  };
}

export async function stopContainers() {
  const started = globalThis[KEY] ?? [];
  await Promise.all(started.map((c) => c.stop()));
}
