#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for development, tests and benchmarks, on 127.0.0.1.
#
#   eng/postgres.sh            start (or reuse) the cluster; prints the connection string last
#   source eng/postgres.sh     the same, and exports ALLOCATOR_POSTGRES (the connection string)
#   eng/postgres.sh stop       stop the cluster this script started
#   eng/postgres.sh status     say whether it runs, and where
#   eng/postgres.sh start --name second   another cluster of its own, in .pg/second/ (any of the
#                              commands takes --name; issue 23: a second database for placing pools,
#                              eng/run.sh --databases 2). Sourced, a named start exports nothing.
#
# The cluster lives in .pg/ at the repository root (git-ignored). PostgreSQL is installed from
# Debian's packages when no server binaries are found. Set ALLOCATOR_PG_PORT to choose the port;
# otherwise 55432 is tried first, then the next free port. ALLOCATOR_PG_SETTINGS adds server
# settings to a start (e.g. "-c autovacuum_naptime=10s", ADR 0028); a running cluster keeps its own.
set -euo pipefail

_pg_main() {
  local root; root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local cmd="${1:-start}" name=""
  if [ "${2:-}" = "--name" ]; then name="${3:-}"; fi
  if [ -n "$name" ] && ! [[ "$name" =~ ^[a-z0-9][a-z0-9_-]*$ ]]; then echo "postgres: --name takes [a-z0-9_-]" >&2; return 2; fi
  local home="$root/.pg${name:+/$name}"
  local data="$home/data" log="$home/postgres.log" portfile="$home/port"

  local bindir=""
  _pg_find_bindir() {
    bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  }
  _pg_find_bindir

  # initdb and postgres refuse to run as root; run them as the postgres user then.
  _pg_as() {
    if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
  }

  _pg_running() {
    [ -f "$data/postmaster.pid" ] && _pg_as "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1
  }

  case "$cmd" in
    stop)
      if [ -n "$bindir" ] && _pg_running; then _pg_as "$bindir/pg_ctl" -D "$data" -m fast stop >/dev/null; echo "postgres: stopped"; else echo "postgres: not running"; fi
      return 0 ;;
    status)
      if [ -n "$bindir" ] && _pg_running; then echo "postgres: running on 127.0.0.1:$(cat "$portfile")"; else echo "postgres: not running"; fi
      return 0 ;;
    start) ;;
    *) echo "usage: eng/postgres.sh [start|stop|status] [--name NAME]" >&2; return 2 ;;
  esac

  if [ -z "$bindir" ]; then
    echo "postgres: server binaries not found; installing Debian's postgresql package" >&2
    if [ "$(id -u)" != "0" ]; then echo "postgres: need root to install (apt-get install postgresql)" >&2; return 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    _pg_find_bindir
    [ -n "$bindir" ] || { echo "postgres: installation did not provide server binaries" >&2; return 1; }
  fi

  mkdir -p "$home"
  if [ "$(id -u)" = "0" ]; then
    chown postgres "$root/.pg" "$home"
    # A clone in a private folder (mktemp -d is mode 700) is not traversable by the postgres
    # user; grant traverse-only (o+x) on the folders above .pg that lack it.
    local dir="$root"
    while [ "$dir" != "/" ]; do
      if ! runuser -u postgres -- test -x "$dir"; then chmod o+x "$dir"; fi
      dir="$(dirname "$dir")"
    done
  fi

  if ! _pg_running; then
    if [ ! -f "$data/PG_VERSION" ]; then
      _pg_as "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
      # Settings for a disposable development cluster. Durability stays on (fsync,
      # synchronous_commit): group commit is part of what the benchmarks measure.
      cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$home'
max_connections = 400
shared_buffers = 512MB
max_wal_size = 2GB
checkpoint_timeout = 15min
log_min_messages = warning
log_lock_waits = off
# The worker table takes a non-HOT update per allocation and per release; its per-table
# autovacuum thresholds (migration 0001) only matter if the launcher looks often enough. The
# default naptime (1 min) let hundreds of thousands of dead tuples pile up between visits under
# load. See docs/postgresql.md.
autovacuum_naptime = 1s
CONF
    fi

    local port="${ALLOCATOR_PG_PORT:-}"
    if [ -z "$port" ]; then
      port=55432
      while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    fi
    echo "$port" >"$portfile"
    if ! _pg_as "$bindir/pg_ctl" -D "$data" -l "$log" -o "-p $port ${ALLOCATOR_PG_SETTINGS:-}" -w -t 60 start >/dev/null; then
      echo "postgres: failed to start; last lines of $log:" >&2
      tail -n 20 "$log" >&2 || true
      return 1
    fi
    _pg_as "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname = 'allocator'" | grep -q 1 \
      || _pg_as "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres allocator
    echo "postgres: started on 127.0.0.1:$port (data in ${data#$root/})" >&2
  fi

  local connection="Host=127.0.0.1;Port=$(cat "$portfile");Username=postgres;Database=allocator"
  if [ -z "$name" ]; then
    ALLOCATOR_POSTGRES="$connection"
    export ALLOCATOR_POSTGRES
  fi
  echo "$connection"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  _pg_main "$@"
else
  # Sourced: do not leave errexit/nounset switched on in the caller's shell.
  set +euo pipefail
  _pg_main "$@"
fi
