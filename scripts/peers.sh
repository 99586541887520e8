#!/usr/bin/env bash
# The peers kubecpu is compared with (docs/COMPARISON.md, benchmarks/peers.py): the NRI resource-policy plugins
# topology-aware and balloons of github.com/containers/nri-plugins, built from the Go module proxy at a pinned release.
# Prints the paths of the two binaries, one a line.
#
#   peers.sh            build them once per machine (or find them in the cache), print their paths
#   peers.sh versions   one line per peer built: name, version, path, the seconds its build took
#   peers.sh bin-dir    build them (or find them), print the directory that holds both
#
# How, as they are built outside their repository: every served version of github.com/containers/nri-plugins requires
# its nested module .../pkg/topology through `replace => ./pkg/topology`, which a module zip leaves out and the proxy
# does not serve. An unmodified copy of that folder at the release is in the shared workspace
# (${KUBECPU_SHARED:-../shared}/upstream/nri-plugins-pkg-topology-VERSION, see its README.md): a scratch module
# requires the release and replaces the nested module by that folder (and runtime-tools as the release's go.mod does),
# then `go mod tidy` and `go build` of both commands, CGO off, static. Nothing of theirs enters the clone: the scratch
# module, the binaries and Go's module and build caches are outside it, in ~/.cache/kubecpu/upstream/nri-plugins-VERSION
# (or $KUBECPU_UPSTREAM_CACHE) with a `done` marker, built in a temporary directory and renamed, a lock per version,
# as scripts/kubelet.sh and scripts/runtimes.sh do. The build's seconds are kept beside the binaries (build-seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
NRI_PLUGINS_VERSION=v0.14.0
RUNTIME_TOOLS=v0.0.0-20221026201742-946c877fa809  # the release's own replace of opencontainers/runtime-tools
cache=${KUBECPU_UPSTREAM_CACHE:-$HOME/.cache/kubecpu/upstream}
[[ -n $(command -v go) || ! -x /usr/local/go/bin/go ]] || PATH=/usr/local/go/bin:$PATH
dest=$cache/nri-plugins-$NRI_PLUGINS_VERSION
peers=(topology-aware balloons)

print() {
  for name in "${peers[@]}"; do echo "$dest/bin/$name"; done
}

build() {
  if [[ ! -f $dest/done ]]; then
    mkdir -p "$cache"
    exec 9>"$cache/.lock-nri-plugins-$NRI_PLUGINS_VERSION"
    flock 9
  fi
  if [[ -f $dest/done ]]; then
    print
    return
  fi
  local shared topology
  shared=$(cd "${KUBECPU_SHARED:-../shared}" 2>/dev/null && pwd) || {
    echo "peers.sh: no shared workspace at ${KUBECPU_SHARED:-../shared} (set KUBECPU_SHARED)" >&2; exit 1; }
  topology=$shared/upstream/nri-plugins-pkg-topology-$NRI_PLUGINS_VERSION
  if [[ ! -f $topology/go.mod ]]; then
    echo "peers.sh: $topology/go.mod is missing (the nested module pkg/topology the proxy does not serve)" >&2
    exit 1
  fi
  local work started=$SECONDS module=github.com/containers/nri-plugins
  work=$(mktemp -d "$cache/.build-XXXXXX")
  mkdir -p "$work/mod" "$work/bin"
  (
    cd "$work/mod"
    printf 'module kubecpu.test/nri-peers\n\ngo 1.26.0\n\nrequire (\n\t%s %s\n\t%s/pkg/topology v0.0.0\n)\n\nreplace (\n\t%s/pkg/topology v0.0.0 => %s\n\tgithub.com/opencontainers/runtime-tools => github.com/opencontainers/runtime-tools %s\n)\n' \
      "$module" "$NRI_PLUGINS_VERSION" "$module" "$module" "$topology" "$RUNTIME_TOOLS" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "%s/cmd/plugins/topology-aware"\n\t_ "%s/cmd/plugins/balloons"\n)\n' \
      "$module" "$module" > tools.go
    go mod tidy
    CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -o "$work/bin/" \
      -ldflags "-s -w -X $module/pkg/version.Version=$NRI_PLUGINS_VERSION" \
      "$module/cmd/plugins/topology-aware" "$module/cmd/plugins/balloons"
  ) >&2
  rm -rf "$work/mod"
  echo $((SECONDS - started)) > "$work/build-seconds"
  echo "nri-plugins $NRI_PLUGINS_VERSION (${peers[*]}) built in $((SECONDS - started)) s" >&2
  rm -rf "$dest"
  mv "$work" "$dest"
  touch "$dest/done"
  print
}

case ${1:-} in
  "") build ;;
  bin-dir) build >/dev/null && echo "$dest/bin" ;;  # the directory of both (scripts/guest.py shares them in)
  versions)
    if [[ -f $dest/done ]]; then
      for name in "${peers[@]}"; do
        echo "$name $NRI_PLUGINS_VERSION $dest/bin/$name $(cat "$dest/build-seconds" 2>/dev/null || echo '?') s"
      done
    fi
    true ;;
  *) echo "usage: $0 [versions|bin-dir]" >&2; exit 2 ;;
esac
