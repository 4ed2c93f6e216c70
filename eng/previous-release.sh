#!/usr/bin/env bash
# Builds the previous release (eng/previous-release.txt) from git history, for the compatibility
# checks (ADR 0026): its host (published, as operators deploy it), its client package, and its
# PostgreSQL store tests (the conformance suite that must pass on a schema this build migrated).
#
#   eng/previous-release.sh            build it once into artifacts/previous/<version>/ (reused later)
#   eng/previous-release.sh --print    print that directory (build it first when missing)
#   eng/previous-release.sh --version  print the previous release's version
#
# The source is a detached git worktree of the release commit at artifacts/previous/<version>/src;
# nothing of it is committed. Needs the commit in this clone's history (a full clone, not --depth).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

field() { sed -n "s/^$1=//p" eng/previous-release.txt; }
version="$(field version)"
commit="$(field commit)"
[ -n "$version" ] && [ -n "$commit" ] || { echo "previous-release: eng/previous-release.txt needs version= and commit=" >&2; exit 2; }
if [ "${1:-}" = "--version" ]; then echo "$version"; exit 0; fi

out="$root/artifacts/previous/$version"
stamp="$out/built-from"
# Test assemblies running side by side may ask at once: one builds, the others wait for it.
mkdir -p "$root/artifacts/previous"
exec 9>"$root/artifacts/previous/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$commit" ]; then
  if [ "${1:-}" = "--print" ]; then echo "$out"; fi
  exit 0
fi

if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  # A shallow clone lacks the release: deepen it from where it came, once.
  if [ "$(git rev-parse --is-shallow-repository)" = "true" ]; then git fetch -q --unshallow >&2 || true; fi
  git cat-file -e "$commit^{commit}" 2>/dev/null || {
    echo "previous-release: commit $commit (release $version) is not in this clone's history; clone with full history (no --depth)." >&2
    exit 1
  }
fi

echo "previous-release: building $version ($commit) into $out" >&2
rm -rf "$out"
git worktree prune
mkdir -p "$out"
git worktree add -q --detach "$out/src" "$commit"

# The release's own build files, with its version stamped on (0.9.0 predates the version property).
build=(-c Release -nologo -v q -clp:ErrorsOnly "-p:Version=$version")
# The builds do not inherit the lock's descriptor (9>&-): a process they leave behind, the
# compiler server, would hold the lock for as long as it lives, and every later caller would wait
# for it (issue 46: the compatibility checks waited about 7 minutes for the server's idle timeout).
(
  cd "$out/src"
  dotnet publish src/Allocator.Host/Allocator.Host.csproj "${build[@]}" -o "$out/host" >&2
  dotnet build tests/Allocator.Storage.PostgreSql.Tests/Allocator.Storage.PostgreSql.Tests.csproj "${build[@]}" >&2
  dotnet pack src/Allocator.Client/Allocator.Client.csproj "${build[@]}" -o "$out/packages" >&2
) 9>&-
echo "$commit" > "$stamp"
if [ "${1:-}" = "--print" ]; then echo "$out"; fi
