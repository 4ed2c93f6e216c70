#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for development, tests and benchmarks, on 127.0.0.1.
#
#   eng/postgres.sh            start (or reuse) the cluster; prints the connection string last
#   source eng/postgres.sh     the same, and exports ALLOCATOR_POSTGRES (the connection string)
#   eng/postgres.sh stop       stop the cluster this script started, and its standby if it has one
#   eng/postgres.sh status     say whether it runs, and where; with a standby, which of the two is
#                              the primary and how they replicate
#   eng/postgres.sh start --name second   another cluster of its own, in .pg/second/ (any of the
#                              commands takes --name; issue 23: a second database for placing pools,
#                              eng/run.sh --databases 2). Sourced, a named start exports nothing.
#   eng/postgres.sh standby [--async]   start (or reuse) a streaming standby of the cluster, in
#                              .pg/standby/ (of --name NAME: .pg/NAME-standby/), synchronous unless
#                              --async (issue 48, eng/run.sh --standby); prints its connection
#                              string, then, last, one naming both, with which Npgsql connects to
#                              whichever of the two is the primary (docs/postgresql.md, "A standby
#                              on this machine")
#   eng/postgres.sh promote    make the standby the primary (pg_ctl promote); the primary must be
#                              down (kill -9 it to try a failover)
#   eng/postgres.sh rejoin     after a promotion: the old primary, rewound (pg_rewind), becomes the
#                              new primary's standby, so that a second failover can go back
#
# The cluster lives in .pg/ at the repository root (git-ignored). PostgreSQL is installed from
# Debian's packages when no server binaries are found. Set ALLOCATOR_PG_PORT to choose the port;
# otherwise 55432 is tried first, then the next free port (a named cluster takes the first free
# port from ALLOCATOR_PG_PORT on). A standby takes the first free port after its primary's, or
# ALLOCATOR_PG_STANDBY_PORT. ALLOCATOR_PG_SETTINGS adds server settings to a start (e.g.
# "-c autovacuum_naptime=10s", ADR 0028); a running cluster keeps its own.
#
# A cluster and its standby are a pair named by their folders: after a failover the one in
# .pg/standby/ is the primary and .pg/ is its standby (status says which is which). A primary whose
# standby was promoted is not started again as a primary (both would take writes): rejoin it.
set -euo pipefail

_pg_main() {
  local root; root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local cmd="${1:-start}" name="" async=0
  if [ $# -gt 0 ]; then shift; fi
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name="${2:-}"; shift; if [ $# -gt 0 ]; then shift; fi ;;
      --async) async=1; shift ;;
      *) echo "postgres: unknown argument '$1'" >&2; return 2 ;;
    esac
  done
  if [ -n "$name" ] && ! [[ "$name" =~ ^[a-z0-9][a-z0-9_-]*$ ]]; then echo "postgres: --name takes [a-z0-9_-]" >&2; return 2; fi

  # The pair: the cluster (a) and its standby's folder (b). --name standby or NAME-standby names
  # the standby's folder itself, so that its pair is the same.
  local name_a="$name"
  if [ "$name" = "standby" ]; then name_a=""; elif [[ "$name" == *-standby ]]; then name_a="${name%-standby}"; fi
  local home_a="$root/.pg${name_a:+/$name_a}" home_b="$root/.pg/${name_a:+$name_a-}standby"
  local home="$root/.pg${name:+/$name}"
  local data="$home/data" portfile="$home/port"

  local bindir=""
  _pg_find_bindir() {
    bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  }
  _pg_find_bindir

  # initdb and postgres refuse to run as root; run them as the postgres user then.
  _pg_as() {
    if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
  }

  _pg_running() { _pg_up "$home"; }

  # The same questions of any folder of the pair ($1: .pg/, .pg/standby/, ...). A postmaster
  # killed with -9 stays a zombie for a second or two where nothing reaps orphans at once
  # (pg_ctl status counts it as running): not up.
  _pg_up() {
    local pid; pid="$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && [ -e "/proc/$pid" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$pid/status" \
      && grep -aqs postgres "/proc/$pid/cmdline"
  }
  _pg_port() { cat "$1/port" 2>/dev/null || echo 0; }
  _pg_sql() { _pg_as "$bindir/psql" -h 127.0.0.1 -p "$(_pg_port "$1")" -U postgres -d postgres -qtAX -c "$2"; }
  _pg_in_recovery() { [ "$(_pg_sql "$1" "SELECT pg_is_in_recovery()" 2>/dev/null)" = "t" ]; }
  _pg_is_primary() { _pg_up "$1" && [ "$(_pg_sql "$1" "SELECT pg_is_in_recovery()" 2>/dev/null)" = "f" ]; }
  _pg_exists() { [ -f "$1/data/PG_VERSION" ]; }
  # Made as a standby, or still one: a promotion removes the file.
  _pg_standby_file() { [ -f "$1/data/standby.signal" ]; }
  _pg_label() { local rel="${1#$root/}"; echo "$rel/"; }
  # The application_name a folder's server uses when it streams from the other: its folder name.
  _pg_app() { if [ "$1" = "$root/.pg" ]; then echo "main"; else basename "$1"; fi; }
  _pg_peer() { if [ "$1" = "$home_a" ]; then echo "$home_b"; else echo "$home_a"; fi; }
  # The newest timeline a folder has seen (its highest timeline history file): a promotion starts
  # the next one, so of two primaries the promoted one has the higher.
  _pg_timeline() {
    local newest=1 file tli
    for file in "$1"/data/pg_wal/*.history; do
      [ -e "$file" ] || continue
      tli=$((16#$(basename "$file" .history)))
      if [ "$tli" -gt "$newest" ]; then newest="$tli"; fi
    done
    echo "$newest"
  }
  # Sets ($3 given) or removes a setting in a stopped cluster's postgresql.auto.conf (the file
  # ALTER SYSTEM writes; the last line naming a setting wins).
  _pg_auto_conf() {
    local file="$1/data/postgresql.auto.conf"
    _pg_as sed -i "/^[[:space:]]*$2[[:space:]]*=/d" "$file"
    if [ $# -ge 3 ]; then printf "%s = '%s'\n" "$2" "$3" | _pg_as tee -a "$file" >/dev/null; fi
  }
  _pg_conninfo() { echo "host=127.0.0.1 port=$(_pg_port "$1") user=postgres application_name=$2"; }
  _pg_connection() { echo "Host=127.0.0.1;Port=$(_pg_port "$1");Username=postgres;Database=allocator"; }
  # Npgsql tries the hosts in order and uses the one that is the primary (issue 48).
  _pg_pair_connection() {
    echo "Host=127.0.0.1:$(_pg_port "$home_a"),127.0.0.1:$(_pg_port "$home_b");Username=postgres;Database=allocator;Target Session Attributes=primary"
  }

  _pg_first_free() {
    local port="$1"
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    echo "$port"
  }

  # Makes a folder (and those above .pg/) usable by the postgres user.
  _pg_folder() {
    mkdir -p "$1"
    if [ "$(id -u)" = "0" ]; then
      chown postgres "$root/.pg" "$1"
      # A clone in a private folder (mktemp -d is mode 700) is not traversable by the postgres
      # user; grant traverse-only (o+x) on the folders above .pg that lack it.
      local dir="$root"
      while [ "$dir" != "/" ]; do
        if ! runuser -u postgres -- test -x "$dir"; then chmod o+x "$dir"; fi
        dir="$(dirname "$dir")"
      done
    fi
  }

  # Starts the server of folder $1 (made first when it is the cluster itself and has no data).
  _pg_start() {
    local h="$1" d="$1/data" peer; peer="$(_pg_peer "$1")"
    if [ ! -f "$d/PG_VERSION" ]; then
      if [ "$h" = "$home_b" ]; then echo "postgres: no standby in $(_pg_label "$h") yet: eng/postgres.sh standby${name_a:+ --name $name_a} makes it" >&2; return 1; fi
      _pg_as "$bindir/initdb" -D "$d" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
      # Settings for a disposable development cluster. Durability stays on (fsync,
      # synchronous_commit): group commit is part of what the benchmarks measure.
      cat >>"$d/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$h'
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
# So that after a failover this cluster, rewound with pg_rewind, can follow the promoted standby
# (eng/postgres.sh rejoin) instead of being copied whole again. Hint bits then cost WAL too.
wal_log_hints = on
CONF
    fi

    if ! _pg_standby_file "$h" && _pg_exists "$peer" && ! _pg_standby_file "$peer" \
      && [ "$(_pg_timeline "$peer")" -ge "$(_pg_timeline "$h")" ]; then
      # Its standby was promoted: started as a primary too, it would take writes the other never sees.
      echo "postgres: $(_pg_label "$peer") was promoted and is the primary now; $(_pg_label "$h") is behind it." >&2
      echo "postgres: eng/postgres.sh rejoin${name_a:+ --name $name_a} makes it the standby of $(_pg_label "$peer")" >&2
      return 1
    fi
    # Synchronous replication with no standby to confirm would hold every commit: a primary whose
    # standby is down starts without it (eng/postgres.sh standby sets it again).
    if ! _pg_standby_file "$h" && ! _pg_up "$peer" && [ -f "$d/postgresql.auto.conf" ] \
      && grep -q "^[[:space:]]*synchronous_standby_names" "$d/postgresql.auto.conf"; then
      _pg_auto_conf "$h" synchronous_standby_names
      echo "postgres: its standby $(_pg_label "$peer") is not running: $(_pg_label "$h") starts without synchronous replication" >&2
    fi

    local port="" base port_chosen=0
    if [ "$h" = "$home_b" ] && [ -z "$name_a" ] && [ -n "${ALLOCATOR_PG_STANDBY_PORT:-}" ]; then
      port="$ALLOCATOR_PG_STANDBY_PORT"
    elif [ "$h" = "$root/.pg" ] && [ -n "${ALLOCATOR_PG_PORT:-}" ]; then
      port="$ALLOCATOR_PG_PORT"
    elif _pg_exists "$home_b" && [ -f "$h/port" ] && [ "$(_pg_first_free "$(_pg_port "$h")")" = "$(_pg_port "$h")" ]; then
      # One of a standby pair keeps its port while it is free: the pair's connection string names both.
      port="$(_pg_port "$h")"
    elif [ "$h" = "$home_b" ]; then
      base="$(_pg_port "$home_a")"; if [ "$base" = 0 ]; then base="${ALLOCATOR_PG_PORT:-55432}"; fi
      port="$(_pg_first_free $((base + 1)))"
      port_chosen=1
    else
      port="$(_pg_first_free "${ALLOCATOR_PG_PORT:-55432}")"
      port_chosen=1
    fi
    echo "$port" >"$h/port"
    if _pg_standby_file "$h"; then
      # Its primary may have started on another port since.
      _pg_auto_conf "$h" primary_conninfo "$(_pg_conninfo "$peer" "$(_pg_app "$h")")"
    fi
    # A port nothing listens on may still be taken: inside the ephemeral range (32768-60999 on
    # Linux) a client connection's local end can hold it, and the server's bind then fails with
    # "Address already in use" although the probe above found it free (a CI machine did, at 55432).
    # A port this script chose is then given up for the next free one, a few times.
    local tries=0 logged
    while :; do
      logged=0; if [ -f "$h/postgres.log" ]; then logged="$(wc -l <"$h/postgres.log")"; fi
      if _pg_as "$bindir/pg_ctl" -D "$d" -l "$h/postgres.log" -o "-p $port ${ALLOCATOR_PG_SETTINGS:-}" -w -t 60 start >/dev/null; then
        break
      fi
      tries=$((tries + 1))
      if [ "$port_chosen" = 1 ] && [ "$tries" -lt 8 ] \
        && tail -n +"$((logged + 1))" "$h/postgres.log" 2>/dev/null | grep -q "could not bind.*Address already in use"; then
        echo "postgres: port $port is taken although nothing listens on it; trying the next free port" >&2
        port="$(_pg_first_free $((port + 1)))"
        echo "$port" >"$h/port"
        continue
      fi
      echo "postgres: failed to start; last lines of $h/postgres.log:" >&2
      tail -n 20 "$h/postgres.log" >&2 || true
      return 1
    done
    if _pg_standby_file "$h"; then
      echo "postgres: started on 127.0.0.1:$port (data in ${d#$root/}), a standby of $(_pg_label "$peer")" >&2
      return 0
    fi
    _pg_as "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname = 'allocator'" | grep -q 1 \
      || _pg_as "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres allocator
    echo "postgres: started on 127.0.0.1:$port (data in ${d#$root/})" >&2
  }

  # Stops folder $1's server; a synchronous primary it streams to is told first not to wait for it.
  _pg_stop() {
    local peer; peer="$(_pg_peer "$1")"
    _pg_up "$1" || return 0
    if _pg_in_recovery "$1" && _pg_is_primary "$peer" \
      && [ -n "$(_pg_sql "$peer" "SHOW synchronous_standby_names")" ]; then
      _pg_sql "$peer" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
      _pg_sql "$peer" "SELECT pg_reload_conf()" >/dev/null
      echo "postgres: $(_pg_label "$peer") commits without its standby now" >&2
    fi
    _pg_as "$bindir/pg_ctl" -D "$1/data" -m fast stop >/dev/null
  }

  # The primary of the pair names the standby its commits wait for (or none with --async), then
  # waits up to 30 s until it streams; the mode is kept for rejoin.
  _pg_replicate() {
    local primary="$1" standby="$2" app; app="$(_pg_app "$2")"
    if [ "$async" = 1 ]; then
      echo async >"$home_b/replication"
      _pg_sql "$primary" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
    else
      echo sync >"$home_b/replication"
      _pg_sql "$primary" "ALTER SYSTEM SET synchronous_standby_names = '\"$app\"'" >/dev/null
      _pg_sql "$primary" "ALTER SYSTEM SET synchronous_commit = on" >/dev/null
    fi
    _pg_sql "$primary" "SELECT pg_reload_conf()" >/dev/null
    local want="async"; if [ "$async" = 0 ]; then want="sync"; fi
    local _ state=""
    for _ in $(seq 1 60); do
      state="$(_pg_sql "$primary" "SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = '$app'" || true)"
      if [ "$state" = "streaming $want" ]; then break; fi
      sleep 0.5
    done
    if [ "$state" != "streaming $want" ]; then
      echo "postgres: $(_pg_label "$standby") does not stream from $(_pg_label "$primary") after 30 s (${state:-not connected}); see $standby/postgres.log" >&2
      return 1
    fi
    echo "postgres: $(_pg_label "$standby") on 127.0.0.1:$(_pg_port "$standby") streams from $(_pg_label "$primary") on 127.0.0.1:$(_pg_port "$primary"), $( [ "$async" = 1 ] && echo "asynchronously" || echo "synchronously (each commit waits for it)")" >&2
  }

  # Which folder of the pair runs as the primary (empty when none does).
  _pg_primary() {
    local h
    for h in "$home_a" "$home_b"; do
      if _pg_is_primary "$h"; then echo "$h"; return 0; fi
    done
  }

  # One line on a folder of the pair, for status.
  _pg_describe() {
    if ! _pg_up "$1"; then echo "down"; return 0; fi
    if _pg_in_recovery "$1"; then echo "up on 127.0.0.1:$(_pg_port "$1"), a standby"
    elif _pg_is_primary "$1"; then echo "up on 127.0.0.1:$(_pg_port "$1"), the primary"
    else echo "on 127.0.0.1:$(_pg_port "$1"), not answering"; fi
  }

  case "$cmd" in
    stop)
      if [ "$home" = "$home_a" ] && _pg_up "$home_b"; then
        # The pair: its primary first, so that no commit waits for a standby that is gone.
        local first="$home_a" second="$home_b" was_up=0
        if _pg_running; then was_up=1; fi
        if _pg_up "$home_a" && _pg_in_recovery "$home_a"; then first="$home_b"; second="$home_a"; fi
        _pg_up "$first" && _pg_as "$bindir/pg_ctl" -D "$first/data" -m fast stop >/dev/null
        _pg_up "$second" && _pg_as "$bindir/pg_ctl" -D "$second/data" -m fast stop >/dev/null
        if [ "$was_up" = 1 ]; then echo "postgres: stopped (and $(_pg_label "$home_b"))"; else echo "postgres: not running; stopped $(_pg_label "$home_b")"; fi
      elif [ -n "$bindir" ] && _pg_running; then
        _pg_stop "$home"; echo "postgres: stopped"
      else
        echo "postgres: not running"
      fi
      return 0 ;;
    status)
      # A reader that stops at the first line (grep -q "running on") must not make the script
      # fail with SIGPIPE: with pipefail, a running cluster would read as not running.
      local out
      if [ -n "$bindir" ] && _pg_running; then
        out="postgres: running on 127.0.0.1:$(cat "$portfile")$( _pg_exists "$home_b" && { _pg_in_recovery "$home" && echo " (a standby)" || { _pg_is_primary "$home" && echo " (the primary)"; } || echo " (not answering)"; } || true )"
      else
        out="postgres: not running"
      fi
      # The other of the pair, and how the primary replicates to it.
      if [ -n "$bindir" ] && _pg_exists "$home_b"; then
        local other; other="$(_pg_peer "$home")"
        out+=$'\n'"postgres: the other of its pair, $(_pg_label "$other"): $(_pg_describe "$other")"
        local primary; primary="$(_pg_primary)"
        if [ -n "$primary" ]; then
          local rows; rows="$(_pg_sql "$primary" "SELECT application_name || ' ' || state || ', sync_state ' || sync_state FROM pg_stat_replication" || true)"
          out+=$'\n'"postgres: replication from $(_pg_label "$primary"): ${rows:-no standby connected}; synchronous_standby_names '$(_pg_sql "$primary" "SHOW synchronous_standby_names")'"
        fi
      fi
      trap '' PIPE
      printf '%s\n' "$out" 2>/dev/null || true
      trap - PIPE
      return 0 ;;
    start|standby|promote|rejoin) ;;
    *) echo "usage: eng/postgres.sh [start|stop|status|standby [--async]|promote|rejoin] [--name NAME]" >&2; return 2 ;;
  esac

  if [ -z "$bindir" ]; then
    echo "postgres: server binaries not found; installing Debian's postgresql package" >&2
    if [ "$(id -u)" != "0" ]; then echo "postgres: need root to install (apt-get install postgresql)" >&2; return 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    _pg_find_bindir
    [ -n "$bindir" ] || { echo "postgres: installation did not provide server binaries" >&2; return 1; }
  fi

  case "$cmd" in
    start)
      _pg_folder "$home"
      if ! _pg_running; then _pg_start "$home" || return 1; fi
      if _pg_standby_file "$home"; then
        echo "postgres: $(_pg_label "$home") is a standby (read only) of $(_pg_label "$(_pg_peer "$home")"); eng/postgres.sh standby${name_a:+ --name $name_a} prints the connection string of the pair" >&2
      fi
      local connection; connection="$(_pg_connection "$home")"
      if [ -z "$name" ]; then
        ALLOCATOR_POSTGRES="$connection"
        export ALLOCATOR_POSTGRES
      fi
      echo "$connection"
      return 0 ;;

    standby)
      _pg_folder "$home_a"; _pg_folder "$home_b"
      if ! _pg_up "$home_a"; then _pg_start "$home_a" || return 1; fi
      if ! _pg_exists "$home_b"; then
        if _pg_in_recovery "$home_a"; then echo "postgres: $(_pg_label "$home_a") is a standby and $(_pg_label "$home_b") is gone: nothing to stream from" >&2; return 1; fi
        if [ "$(_pg_sql "$home_a" "SHOW wal_log_hints")" != "on" ] && [ "$(_pg_sql "$home_a" "SHOW data_checksums")" != "on" ]; then
          # A cluster made before wal_log_hints was in the settings above. The primary is not
          # restarted under whatever uses it: the setting waits for its next start.
          _pg_sql "$home_a" "ALTER SYSTEM SET wal_log_hints = on" >/dev/null
          echo "postgres: wal_log_hints is off on $(_pg_label "$home_a") (made before it was set); set for its next start. Until it is restarted, rejoin after a failover copies the new primary whole (pg_basebackup) instead of rewinding it" >&2
        fi
        local port_b
        if [ -z "$name_a" ] && [ -n "${ALLOCATOR_PG_STANDBY_PORT:-}" ]; then port_b="$ALLOCATOR_PG_STANDBY_PORT"; else port_b="$(_pg_first_free $(( $(_pg_port "$home_a") + 1 )))"; fi
        echo "postgres: copying $(_pg_label "$home_a") to $(_pg_label "$home_b") (pg_basebackup)" >&2
        echo "$port_b" >"$home_b/port"
        # -R writes standby.signal and primary_conninfo, which names the standby (application_name)
        # for synchronous_standby_names and pg_stat_replication.
        if ! _pg_as "$bindir/pg_basebackup" -d "$(_pg_conninfo "$home_a" "$(_pg_app "$home_b")")" -D "$home_b/data" -R -X stream -c fast >&2; then
          echo "postgres: pg_basebackup failed" >&2; _pg_as rm -rf "$home_b/data"; return 1
        fi
        # The copy has the primary's configuration: its own socket folder, and no synchronous
        # standby of its own (promoted, it would wait for one that is not there).
        _pg_as sed -i "s|^unix_socket_directories = .*|unix_socket_directories = '$home_b'|" "$home_b/data/postgresql.conf"
        _pg_auto_conf "$home_b" synchronous_standby_names
      fi
      local h
      for h in "$home_a" "$home_b"; do
        if ! _pg_up "$h"; then _pg_start "$h" || return 1; fi
      done
      local primary; primary="$(_pg_primary)"
      if [ -z "$primary" ]; then echo "postgres: neither $(_pg_label "$home_a") nor $(_pg_label "$home_b") is a primary (promote one: eng/postgres.sh promote${name_a:+ --name $name_a})" >&2; return 1; fi
      local other; other="$(_pg_peer "$primary")"
      if ! _pg_in_recovery "$other"; then echo "postgres: $(_pg_label "$home_a") and $(_pg_label "$home_b") are both primaries: stop the one to rewind, then eng/postgres.sh rejoin${name_a:+ --name $name_a}" >&2; return 1; fi
      _pg_replicate "$primary" "$other" || return 1
      _pg_connection "$home_b"
      _pg_pair_connection
      return 0 ;;

    promote)
      local standby="" h
      for h in "$home_a" "$home_b"; do
        if _pg_up "$h" && _pg_in_recovery "$h"; then standby="$h"; fi
      done
      if [ -z "$standby" ]; then echo "postgres: no standby of $(_pg_label "$home_a") runs" >&2; return 1; fi
      local old; old="$(_pg_peer "$standby")"
      if _pg_up "$old"; then
        # Two primaries would each take writes the other never sees.
        echo "postgres: the primary $(_pg_label "$old") still runs; to try a failover, kill it first: kill -9 \$(head -1 ${old#$root/}/data/postmaster.pid)" >&2
        return 1
      fi
      _pg_as "$bindir/pg_ctl" -D "$standby/data" -w -t 60 promote >/dev/null
      echo "postgres: promoted $(_pg_label "$standby") on 127.0.0.1:$(_pg_port "$standby"); it commits alone until eng/postgres.sh rejoin${name_a:+ --name $name_a} makes $(_pg_label "$old") its standby" >&2
      _pg_pair_connection
      return 0 ;;

    rejoin)
      if ! _pg_exists "$home_a" || ! _pg_exists "$home_b"; then echo "postgres: no standby pair in $(_pg_label "$home_a") and $(_pg_label "$home_b")" >&2; return 1; fi
      local new old
      if _pg_standby_file "$home_a" && _pg_standby_file "$home_b"; then
        echo "postgres: both are standbys: promote one (eng/postgres.sh promote${name_a:+ --name $name_a})" >&2; return 1
      elif _pg_standby_file "$home_a"; then new="$home_b"; old="$home_a"
      elif _pg_standby_file "$home_b"; then new="$home_a"; old="$home_b"
      else
        # Both were primaries: the promoted one is on the newer timeline.
        local tli_a tli_b; tli_a="$(_pg_timeline "$home_a")"; tli_b="$(_pg_timeline "$home_b")"
        if [ "$tli_a" = "$tli_b" ]; then echo "postgres: cannot tell which of the two was promoted (both on timeline $tli_a)" >&2; return 1; fi
        if [ "$tli_b" -gt "$tli_a" ]; then new="$home_b"; old="$home_a"; else new="$home_a"; old="$home_b"; fi
      fi
      if ! _pg_up "$new"; then _pg_start "$new" || return 1; fi
      if ! _pg_is_primary "$new"; then echo "postgres: $(_pg_label "$new") does not answer as a primary" >&2; return 1; fi
      if _pg_up "$old"; then
        if _pg_standby_file "$old" && [ "$(_pg_sql "$new" "SELECT state FROM pg_stat_replication WHERE application_name = '$(_pg_app "$old")'")" = streaming ]; then
          echo "postgres: $(_pg_label "$old") already streams from $(_pg_label "$new"); nothing to rejoin" >&2
          _pg_pair_connection
          return 0
        fi
        # A primary too: whatever it took since the promotion is not in the new primary, and
        # rewinding drops it. A standby that does not stream is rewound as well.
        echo "postgres: stopping $(_pg_label "$old"), which runs but does not follow $(_pg_label "$new")" >&2
        _pg_as "$bindir/pg_ctl" -D "$old/data" -m fast stop >/dev/null
      fi
      # A postmaster killed just now may linger as a zombie for a second or two, and a new one
      # (pg_rewind's recovery, the start) refuses its folder while that pid exists.
      local old_pid _; old_pid="$(head -n 1 "$old/data/postmaster.pid" 2>/dev/null || true)"
      if [ -n "$old_pid" ]; then for _ in $(seq 1 100); do [ -e "/proc/$old_pid" ] || break; sleep 0.3; done; fi
      # pg_rewind reads the source's timeline from its control file, which a promotion updates
      # only at its next checkpoint: without one it finds nothing to rewind.
      _pg_sql "$new" "CHECKPOINT" >/dev/null
      local app; app="$(_pg_app "$old")"
      # Rewound as what it was last (a primary or a standby); single-user recovery refuses standby mode.
      _pg_as rm -f "$old/data/standby.signal" "$old/data/recovery.signal"
      # pg_rewind copies the new primary's configuration files; the old one keeps its own.
      local conf; conf="$(mktemp)"; cp "$old/data/postgresql.conf" "$conf"
      echo "postgres: rewinding $(_pg_label "$old") to follow $(_pg_label "$new") (pg_rewind; log in ${old#$root/}/rewind.log)" >&2
      local rewound=0 control; control="$(_pg_as "$bindir/pg_controldata" -D "$old/data" 2>/dev/null || true)"
      if grep -q "^wal_log_hints setting:[[:space:]]*off" <<<"$control" && grep -q "^Data page checksum version:[[:space:]]*0" <<<"$control"; then
        # It ran without wal_log_hints (its recovery would start with it and pass pg_rewind's own
        # check): pages changed by hint bits alone are not in its WAL, so a rewind could miss them.
        echo "wal_log_hints was off on the old primary: not rewound" >"$old/rewind.log"
      else
        # A server that was killed is first recovered by pg_rewind itself (single-user mode), and
        # that recovery's checkpoint recycles the WAL pg_rewind then reads back to the last
        # checkpoint before the fork. A copy of pg_wal taken before serves it (restore_command).
        _pg_as rm -rf "$old/rewind-wal"
        _pg_as cp -r "$old/data/pg_wal" "$old/rewind-wal"
        _pg_auto_conf "$old" restore_command "cp \"$old/rewind-wal/%f\" \"%p\""
        if _pg_as "$bindir/pg_rewind" -D "$old/data" --restore-target-wal \
          --source-server="host=127.0.0.1 port=$(_pg_port "$new") user=postgres dbname=postgres" >"$old/rewind.log" 2>&1; then
          rewound=1
        fi
        _pg_as rm -rf "$old/rewind-wal"
        _pg_auto_conf "$old" restore_command
      fi
      if [ "$rewound" = 0 ]; then
        # The old data has nothing the new primary needs: a fresh copy is what a rewind makes.
        echo "postgres: $(tail -n 1 "$old/rewind.log"); copying $(_pg_label "$new") whole instead (pg_basebackup)" >&2
        _pg_as rm -rf "$old/data.new"
        if ! _pg_as "$bindir/pg_basebackup" -d "$(_pg_conninfo "$new" "$app")" -D "$old/data.new" -X stream -c fast >&2; then
          echo "postgres: pg_basebackup failed; $(_pg_label "$old") is left as it was" >&2; rm -f "$conf"; return 1
        fi
        _pg_as rm -rf "$old/data"; mv "$old/data.new" "$old/data"
      fi
      cat "$conf" | _pg_as tee "$old/data/postgresql.conf" >/dev/null; rm -f "$conf"
      _pg_as touch "$old/data/standby.signal"
      _pg_auto_conf "$old" synchronous_standby_names
      _pg_auto_conf "$old" primary_conninfo "$(_pg_conninfo "$new" "$app")"
      _pg_start "$old" || return 1
      if [ "$(cat "$home_b/replication" 2>/dev/null || echo sync)" = async ]; then async=1; fi
      _pg_replicate "$new" "$old" || return 1
      _pg_pair_connection
      return 0 ;;
  esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  _pg_main "$@"
else
  # Sourced: do not leave errexit/nounset switched on in the caller's shell.
  set +euo pipefail
  _pg_main "$@"
fi
