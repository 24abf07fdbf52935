#!/usr/bin/env bash
# Builds Gitea, the forge the tests and the demo serve repositories from, from
# its module through the Go module proxy: the server with SQLite (pure Go) and
# its templates and options, no frontend build (the API and Git need none).
# Gitea's module declares its path as gitea.dev while the proxy serves it as
# code.gitea.io/gitea, so it is built from a copy of its own module, as its
# main module. Lands in $GITEA_DIR (default bin/gitea/<version>), git-ignored;
# a stamp makes a second run with the same inputs do nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/gitea/release
source "$root/hack/tools/gitea/release"
dir="${GITEA_DIR:-$root/bin/gitea/$version}"
stamp="$dir/.stamp"
want="$(cat "$0" "$root/hack/tools/gitea/release" | sha256sum | cut -d' ' -f1)"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$dir/gitea" ]]; then
  echo "gitea up to date in ${dir#$root/}"
else
  log "building gitea $version (the first build takes a few minutes)"
  start=$SECONDS
  info="$(cd "$root" && go mod download -json "code.gitea.io/gitea@$version")"
  got="$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",*$/\1/p' <<<"$info")"
  if [[ "$got" != "$sum" ]]; then
    echo "gitea $version: module hash $got, want $sum" >&2
    exit 1
  fi
  mod="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")"
  rm -rf "$dir" && mkdir -p "$dir"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  cp -r "$mod/." "$src/" && chmod -R u+w "$src"
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w -X main.Version=${version#v}" -o "$dir/gitea" .)
  # Read from disk by a build without bindata (STATIC_ROOT_PATH).
  for d in templates options public; do cp -r "$src/$d" "$dir/"; done
  chmod -R u+w "$dir"
  echo "$want" > "$stamp"
  log "gitea built in $((SECONDS - start))s into ${dir#$root/}"
fi
[[ -n "${GITEA_DIR:-}" ]] || ln -sfn "$version" "$root/bin/gitea/current"
