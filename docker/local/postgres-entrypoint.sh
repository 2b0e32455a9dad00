#!/bin/sh
# Initialises an empty data directory as the official image does, then runs the server.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
  initdb --username=postgres --pwfile="$pwfile" --auth-local=trust --auth-host="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" \
    --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  printf "host all all all %s\n" "${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  if [ -n "${POSTGRES_DB:-}" ] && [ "$POSTGRES_DB" != postgres ]; then
    createdb -U postgres "$POSTGRES_DB"
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop
fi
if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
