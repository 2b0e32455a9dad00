/**
 * podman for the image checks (pnpm test:images): installed from Debian's packages when missing,
 * configured by the repo's own files (docker/podman/, pointed at by CONTAINERS_CONF and
 * CONTAINERS_STORAGE_CONF, nothing in /etc changed), the local base images built or reused
 * (docker/local/build-bases.sh), and a Docker-compatible API socket for docker-compose and
 * testcontainers.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, waitFor } from "../processes.js";

export const CONTAINERS_ENV = {
  CONTAINERS_CONF: join(REPO_ROOT, "docker/podman/containers.conf"),
  CONTAINERS_STORAGE_CONF: join(REPO_ROOT, "docker/podman/storage.conf"),
};
/** The Docker API socket `podman system service` listens on for docker-compose and testcontainers. */
export const SOCKET = "/run/botdir-podman/docker.sock";
export const DOCKER_HOST = `unix://${SOCKET}`;

/** Local bases (docker/local/build-bases.sh): no registry needed. */
export const BASES = {
  node: "localhost/botdir-node:24",
  postgres: "localhost/botdir-postgres:15",
  redis: "localhost/botdir-redis:7",
  prometheus: "localhost/botdir-prometheus:2",
};

const DEBIAN_PACKAGES = [
  "podman",
  "buildah",
  "runc",
  "fuse-overlayfs",
  "slirp4netns",
  "uidmap",
  "netavark",
  "aardvark-dns",
  "debootstrap",
  "docker-compose",
];

function installed(pkg: string): boolean {
  const r = spawnSync("dpkg-query", ["-W", "--showformat=$" + "{Status}", pkg], { encoding: "utf8" });
  return r.status === 0 && r.stdout.includes("install ok installed");
}

/** Installs what is missing of podman and its helpers, Debian's docker-compose and debootstrap. */
export function installTools(log: (line: string) => void): void {
  const missing = DEBIAN_PACKAGES.filter((p) => !installed(p));
  if (missing.length === 0) return;
  log(`installing ${missing.join(" ")} from Debian's packages`);
  execFileSync("apt-get", ["update", "-qq"], { stdio: ["ignore", "ignore", "inherit"] });
  execFileSync("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...missing], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}

export function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, ...CONTAINERS_ENV, ...extra };
}

/** Runs podman; returns stdout (trimmed). Throws with stderr on a non-zero exit. */
export function podman(args: string[], options: { input?: string; allowFail?: boolean } = {}): string {
  const r = spawnSync("podman", args, {
    env: env(),
    encoding: "utf8",
    input: options.input,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0 && !options.allowFail) {
    throw new Error(
      `podman ${args.join(" ")} exited ${r.status}: ${(r.stderr || r.stdout).trim().slice(-2000)}`,
    );
  }
  return (r.stdout ?? "").trim();
}

/** podman with its full result (status, stdout, stderr). */
export function podmanResult(args: string[]) {
  return spawnSync("podman", args, { env: env(), encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
}

export function buildBases(log: (line: string) => void): void {
  const r = spawnSync("bash", [join(REPO_ROOT, "docker/local/build-bases.sh")], {
    env: env(),
    stdio: ["ignore", "inherit", "pipe"],
    encoding: "utf8",
  });
  for (const line of (r.stderr ?? "").split("\n")) if (line.startsWith("[bases]")) log(line.slice(8));
  if (r.status !== 0) throw new Error(`building the base images failed: ${(r.stderr ?? "").slice(-2000)}`);
}

/** `podman system service` on SOCKET until stop() (a Docker-compatible API). */
export async function startApiSocket(): Promise<{ stop(): Promise<void> }> {
  rmSync(SOCKET, { force: true });
  execFileSync("mkdir", ["-p", "/run/botdir-podman"]);
  const child: ChildProcess = spawn("podman", ["system", "service", "--time=0", DOCKER_HOST], {
    env: env(),
    stdio: "ignore",
  });
  await waitFor(() => existsSync(SOCKET) && dockerPing(), "podman's API socket", 30_000, 100);
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

function dockerPing(): boolean {
  const r = spawnSync("curl", ["-s", "--unix-socket", SOCKET, "http://d/_ping"], { encoding: "utf8" });
  return r.status === 0 && r.stdout.trim() === "OK";
}
