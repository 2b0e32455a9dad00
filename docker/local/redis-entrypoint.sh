#!/bin/sh
# `redis-server [options]` as the official image runs it: every address, no protected mode, no
# daemon, in /data.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server --bind 0.0.0.0 --protected-mode no --dir /data "$@"
fi
exec "$@"
