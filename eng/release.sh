#!/usr/bin/env bash
# Builds a release of Allocator from a commit (HEAD unless --commit) into artifacts/release/<version>/:
#   Allocator.Client.<version>.nupkg    the .NET client (README, license, Source Link), validated
#   Allocator.Client.<version>.snupkg   against the previous release's package (ADR 0026), and its symbols
#   allocator-<version>-linux-x64.tar.gz  the service, `dotnet publish` for linux-x64 (needs the .NET 10 runtime)
#   CHANGELOG.md, SHA256SUMS            the release's notes and the artifacts' checksums
#
#   eng/release.sh [--commit REV] [--source-url URL] [--repository-url URL] [--baseline-package NUPKG]
#
# --source-url       the public raw-file address of the sources, with {commit} for the commit, for Source
#                    Link (default: from ALLOCATOR_SOURCE_URL; a GitHub origin needs none). Example:
#                    https://raw.githubusercontent.com/OWNER/allocator/{commit}/*
# --repository-url   the repository's address in the package (default: ALLOCATOR_REPOSITORY_URL, or origin)
# --baseline-package the package to validate the client against (default: the previous release's,
#                    built by eng/previous-release.sh)
#
# The sources are a detached worktree of the commit (artifacts/release/.src): a release is a commit,
# never a working copy, and building it leaves the working tree's outputs alone.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

commit="HEAD"
source_url="${ALLOCATOR_SOURCE_URL:-}"
repository_url="${ALLOCATOR_REPOSITORY_URL:-}"
baseline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --commit) commit="$2"; shift 2 ;;
    --source-url) source_url="$2"; shift 2 ;;
    --repository-url) repository_url="$2"; shift 2 ;;
    --baseline-package) baseline="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done

sha="$(git rev-parse --verify "$commit^{commit}")"
if [ -z "$repository_url" ]; then
  repository_url="$(git remote get-url origin 2>/dev/null || true)"
  case "$repository_url" in http://*|https://*) ;; *) repository_url="" ;; esac
fi

# The previous release's client package, the baseline of package validation.
previous_version="$(bash eng/previous-release.sh --version)"
if [ -z "$baseline" ]; then
  baseline="$(bash eng/previous-release.sh --print)/packages/Allocator.Client.$previous_version.nupkg"
fi
[ -f "$baseline" ] || { echo "release: no baseline package at $baseline" >&2; exit 1; }

src="$root/artifacts/release/.src"
rm -rf "$src"
git worktree prune
git worktree add -q --detach "$src" "$sha"
trap 'git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || true' EXIT

version="$(cd "$src" && dotnet msbuild src/Allocator.Client/Allocator.Client.csproj -nologo -getProperty:Version)"
out="$root/artifacts/release/$version"
echo "release: Allocator $version from $sha into $out" >&2
rm -rf "$out"
mkdir -p "$out"

props=(-c Release -nologo -v q -clp:ErrorsOnly -p:ContinuousIntegrationBuild=true)
if [ -n "$repository_url" ]; then props+=("-p:RepositoryUrl=$repository_url"); fi
if [ -n "$source_url" ]; then props+=("-p:AllocatorSourceLinkUrl=${source_url//\{commit\}/$sha}"); fi

(
  cd "$src"
  # The client: package validation compares its API with the previous release's package and fails
  # on anything removed or changed (Microsoft.NET.ApiCompat, part of the SDK).
  dotnet pack src/Allocator.Client/Allocator.Client.csproj "${props[@]}" -o "$out" \
    "-p:PackageValidationBaselinePath=$baseline" >&2
  # The service, framework-dependent, for linux-x64.
  dotnet publish src/Allocator.Host/Allocator.Host.csproj "${props[@]}" -r linux-x64 --self-contained false \
    -o "$src/publish/allocator-$version-linux-x64" >&2
  cp LICENSE CHANGELOG.md "$src/publish/allocator-$version-linux-x64/"
  tar -C "$src/publish" -czf "$out/allocator-$version-linux-x64.tar.gz" "allocator-$version-linux-x64"
  cp CHANGELOG.md "$out/"
)

(cd "$out" && sha256sum Allocator.Client.*.nupkg Allocator.Client.*.snupkg "allocator-$version-linux-x64.tar.gz" > SHA256SUMS)
echo "release: validated against Allocator.Client $previous_version ($(basename "$baseline"))" >&2
ls -1 "$out"
