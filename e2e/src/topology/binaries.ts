/**
 * The server binaries the topology suite runs. A missing one stops the suite with one line naming
 * it and how to install it (never a skip).
 */
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

export interface Binaries {
  pgbouncer: string;
  redisServer: string;
  redisCli: string;
}

const INSTALL: Record<keyof Binaries, { name: string; how: string; also: string[] }> = {
  // Debian installs pgbouncer in /usr/sbin, which is not on every user's PATH.
  pgbouncer: { name: "pgbouncer", how: "apt-get install -y pgbouncer", also: ["/usr/sbin/pgbouncer"] },
  redisServer: { name: "redis-server", how: "apt-get install -y redis-server", also: [] },
  redisCli: { name: "redis-cli", how: "apt-get install -y redis-tools", also: [] },
};

export class MissingBinaryError extends Error {}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function find(name: string, also: string[]): string | undefined {
  const dirs = (process.env.PATH ?? "").split(delimiter).filter((d) => d.length > 0);
  return [...dirs.map((d) => join(d, name)), ...also].find(executable);
}

/** Finds every binary; throws MissingBinaryError with one line per missing one. */
export function findBinaries(): Binaries {
  const found: Partial<Binaries> = {};
  const missing: string[] = [];
  for (const [key, spec] of Object.entries(INSTALL) as [keyof Binaries, (typeof INSTALL)[keyof Binaries]][]) {
    const path = find(spec.name, spec.also);
    if (path) found[key] = path;
    else {
      const where = spec.also.length > 0 ? ` or at ${spec.also.join(", ")}` : "";
      missing.push(`${spec.name} not found on PATH${where}: install it with \`${spec.how}\``);
    }
  }
  if (missing.length > 0) throw new MissingBinaryError(missing.join("\n"));
  return found as Binaries;
}
