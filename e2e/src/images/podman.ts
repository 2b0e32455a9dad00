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

/**
 * What rootful podman needs here and nothing more: runc (crun refuses hybrid cgroups), netavark
 * and aardvark-dns (compose services resolve each other), iptables (netavark's NAT and port
 * forwarding; without it every RUN step fails with `netavark: No such file or directory`); the
 * kernel's overlay, no slirp4netns,
 * uidmap or fuse-overlayfs (rootless only), no buildah CLI (podman build has it built in).
 */
const DEBIAN_PACKAGES = [
  "podman",
  "runc",
  "netavark",
  "aardvark-dns",
  "iptables",
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

/**
 * docker/local/build-bases.sh for `node` (the Debian and Node bases the app targets build on) or
 * `stores` (PostgreSQL, Redis, Prometheus): its `[bases] …` lines are logged as they come.
 */
export function buildBases(what: "node" | "stores", log: (line: string) => void): Promise<void> {
  const child = spawn("bash", [join(REPO_ROOT, "docker/local/build-bases.sh"), what], {
    env: env(),
    stdio: ["ignore", "inherit", "pipe"],
  });
  let stderr = "";
  let pending = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
    pending += chunk.toString();
    const lines = pending.split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) if (line.startsWith("[bases]")) log(line.slice(8));
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`building the ${what} base images failed: ${stderr.slice(-2000)}`)),
    );
  });
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
