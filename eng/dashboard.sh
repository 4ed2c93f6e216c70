#!/usr/bin/env bash
# The standalone Aspire dashboard (traces, metrics and structured logs over OTLP) from its NuGet
# package: no Docker, nothing downloaded from outside the package source (ADR 0019).
#
#   eng/dashboard.sh        start it in the foreground and print the OTLP settings for a service
#   eng/run.sh --dashboard  start it beside the service, which then exports to it (the usual way)
#
# - ALLOCATOR_DASHBOARD_URL (default http://127.0.0.1:18888): the page the browser opens.
# - ALLOCATOR_DASHBOARD_OTLP_URL (default http://127.0.0.1:4317): its OTLP/gRPC endpoint.
# - Anonymous on loopback only. An address that is not loopback needs ALLOCATOR_DASHBOARD_TOKEN:
#   the browser logs in with it and exporters send it (header x-otlp-api-key). Without a token
#   such an address is refused (exit 2): the dashboard shows every span, log line and attribute.
# - Its log goes to artifacts/run/dashboard.log.
#
# Sourced (by eng/run.sh and eng/storm.sh) it only defines the dashboard_* functions.

dashboard_url="${ALLOCATOR_DASHBOARD_URL:-http://127.0.0.1:18888}"
dashboard_url="${dashboard_url%/}"
dashboard_otlp_url="${ALLOCATOR_DASHBOARD_OTLP_URL:-http://127.0.0.1:4317}"
dashboard_otlp_url="${dashboard_otlp_url%/}"
dashboard_pid=""

_dashboard_is_loopback() {
  local host
  host="$(sed -E 's#^[a-z]+://(\[[^]]*\]|[^/:]*).*#\1#' <<<"$1")"
  [[ "$host" =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ || "$host" == "localhost" || "$host" == "[::1]" ]]
}

# Refuses (return 2) an address off loopback without a token; call before starting anything.
dashboard_check() {
  local url
  for url in "$dashboard_url" "$dashboard_otlp_url"; do
    if ! [[ "$url" =~ ^http://[^/]+$ ]]; then
      echo "dashboard: '$url' must be an http:// address without a path (ALLOCATOR_DASHBOARD_URL, ALLOCATOR_DASHBOARD_OTLP_URL)" >&2
      return 2
    fi
    if ! _dashboard_is_loopback "$url" && [ -z "${ALLOCATOR_DASHBOARD_TOKEN:-}" ]; then
      echo "dashboard: refusing to serve $url without authentication: it is not a loopback address." >&2
      echo "dashboard: set ALLOCATOR_DASHBOARD_TOKEN (browser login and OTLP API key), or keep it on 127.0.0.1." >&2
      return 2
    fi
  done
}

# The dashboard's executable, restored from the package source on first use.
_dashboard_executable() {
  local root="$1" project="$1/eng/dashboard/AspireDashboard.csproj"
  dotnet restore "$project" -nologo -v q >&2 || return 1
  dotnet msbuild "$project" -nologo -getProperty:AspireDashboardPath
}

# Starts the dashboard in the background (dashboard_pid), waits until its page answers, and
# exports the OTEL_* settings that make a service started afterwards export to it.
dashboard_start() {
  local root; root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dashboard_check || return $?
  local executable; executable="$(_dashboard_executable "$root")" || { echo "dashboard: the Aspire.Dashboard.Sdk package could not be restored" >&2; return 1; }
  [ -x "$executable" ] || chmod u+x "$executable" 2>/dev/null || true
  mkdir -p "$root/artifacts/run"
  local log="$root/artifacts/run/dashboard.log"
  if [ -n "${ALLOCATOR_DASHBOARD_TOKEN:-}" ]; then
    env ASPNETCORE_URLS="$dashboard_url" ASPIRE_DASHBOARD_OTLP_ENDPOINT_URL="$dashboard_otlp_url" \
      Dashboard__Frontend__AuthMode=BrowserToken Dashboard__Frontend__BrowserToken="$ALLOCATOR_DASHBOARD_TOKEN" \
      Dashboard__Otlp__AuthMode=ApiKey Dashboard__Otlp__PrimaryApiKey="$ALLOCATOR_DASHBOARD_TOKEN" \
      Dashboard__Api__AuthMode=ApiKey Dashboard__Api__PrimaryApiKey="$ALLOCATOR_DASHBOARD_TOKEN" \
      "$executable" >"$log" 2>&1 &
    export OTEL_EXPORTER_OTLP_HEADERS="x-otlp-api-key=$ALLOCATOR_DASHBOARD_TOKEN"
  else
    env ASPNETCORE_URLS="$dashboard_url" ASPIRE_DASHBOARD_OTLP_ENDPOINT_URL="$dashboard_otlp_url" \
      ASPIRE_DASHBOARD_UNSECURED_ALLOW_ANONYMOUS=true "$executable" >"$log" 2>&1 &
  fi
  dashboard_pid=$!
  local _
  for _ in $(seq 1 120); do
    if curl -fsS -o /dev/null "$dashboard_url/" 2>/dev/null; then break; fi
    if ! kill -0 "$dashboard_pid" 2>/dev/null; then
      echo "dashboard: exited during start-up; last lines of artifacts/run/dashboard.log:" >&2
      tail -n 20 "$log" >&2
      dashboard_pid=""
      return 1
    fi
    sleep 0.5
  done
  curl -fsS -o /dev/null "$dashboard_url/" || { echo "dashboard: not answering on $dashboard_url after 60 s" >&2; return 1; }

  export OTEL_EXPORTER_OTLP_ENDPOINT="$dashboard_otlp_url"
  export OTEL_EXPORTER_OTLP_PROTOCOL=grpc
  # Spans within a second and metrics every 5 s, so what was just done is on the page (the SDK's
  # defaults: 5 s and 60 s). Settings given by the caller win.
  export OTEL_BSP_SCHEDULE_DELAY="${OTEL_BSP_SCHEDULE_DELAY:-1000}"
  export OTEL_METRIC_EXPORT_INTERVAL="${OTEL_METRIC_EXPORT_INTERVAL:-5000}"
}

dashboard_stop() {
  if [ -n "$dashboard_pid" ]; then
    kill -TERM "$dashboard_pid" 2>/dev/null || true
    wait "$dashboard_pid" 2>/dev/null || true
    dashboard_pid=""
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
  [ $# -eq 0 ] || { echo "eng/dashboard.sh: unknown argument '$1' (see eng/dashboard.sh --help)" >&2; exit 2; }
  trap 'dashboard_stop; echo "dashboard: stopped"' INT TERM EXIT
  dashboard_start
  cat <<TXT
Aspire dashboard: $dashboard_url (traces: $dashboard_url/traces)
Export to it from a service with:
  OTEL_EXPORTER_OTLP_ENDPOINT=$dashboard_otlp_url OTEL_EXPORTER_OTLP_PROTOCOL=grpc${ALLOCATOR_DASHBOARD_TOKEN:+ OTEL_EXPORTER_OTLP_HEADERS=x-otlp-api-key=<token>}
Ctrl+C stops it.
TXT
  wait "$dashboard_pid" || true
fi
