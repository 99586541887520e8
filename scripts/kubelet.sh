#!/usr/bin/env bash
# The real kubelet, built from the Go module proxy at the releases kubecpu is exact for (KUBELET_VERSIONS.md).
# Prints the directory holding the kubelet binary.
#
#   kubelet.sh 1.35|1.36|1.37   that minor's pinned release (1.35.4, 1.36.3, 1.37.2), built once per machine
#   kubelet.sh versions         one line per kubelet built: version, where
#
# How, as a kubelet is built outside its repository: a scratch module requires k8s.io/kubernetes at the release and
# replaces every k8s.io staging module that the release's go.mod points into its own tree (./staging/src/k8s.io/X)
# with the published k8s.io/X at the matching v0.Y.Z; then `go build k8s.io/kubernetes/cmd/kubelet`, CGO off,
# static. Cached outside the clone by version (~/.cache/kubecpu/upstream/kubelet-vX.Y.Z, or
# $KUBECPU_UPSTREAM_CACHE), as are Go's module and build caches; a lock per version, as scripts/runtimes.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${KUBECPU_UPSTREAM_CACHE:-$HOME/.cache/kubecpu/upstream}
[[ -n $(command -v go) || ! -x /usr/local/go/bin/go ]] || PATH=/usr/local/go/bin:$PATH

release() {
  case $1 in
    1.35) echo v1.35.4 ;;
    1.36) echo v1.36.3 ;;
    1.37) echo v1.37.2 ;;
    *) echo "kubelet.sh: no pinned release for $1 (1.35, 1.36 or 1.37)" >&2; exit 2 ;;
  esac
}

build() {
  local version=$1 dest=$cache/kubelet-$1
  if [[ ! -f $dest/done ]]; then
    mkdir -p "$cache"
    exec 9>"$cache/.lock-kubelet-$version"
    flock 9
  fi
  if [[ -f $dest/done ]]; then
    echo "$dest/bin"
    return
  fi
  local work started=$SECONDS staging=v0.${version#v1.}
  work=$(mktemp -d "$cache/.build-XXXXXX")
  mkdir -p "$work/mod" "$work/bin"
  (
    cd "$work/mod"
    go mod init kubecpu.test/kubelet-build >/dev/null 2>&1
    local src
    src=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    # the release's own replacements of its staging modules, each by its published version
    local replaces=()
    while read -r module; do
      replaces+=("-replace=$module=$module@$staging")
    done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9.-]*\) => \./staging/src/.*#\1#p' "$src/go.mod")
    go mod edit "-require=k8s.io/kubernetes@$version" "${replaces[@]}"
    GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kubelet@$version"
    CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$work/bin/kubelet" \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version" \
      k8s.io/kubernetes/cmd/kubelet
  ) >&2
  rm -rf "$work/mod"
  echo "kubelet $version built in $((SECONDS - started)) s" >&2
  rm -rf "$dest"
  mv "$work" "$dest"
  touch "$dest/done"
  echo "$dest/bin"
}

case ${1:-} in
  1.35 | 1.36 | 1.37) build "$(release "$1")" ;;
  versions)
    for minor in 1.35 1.36 1.37; do
      bin=$cache/kubelet-$(release $minor)/bin/kubelet
      [[ -x $bin ]] && echo "kubelet $("$bin" --version | awk '{print $2}') $(dirname "$bin")"
    done
    true ;;
  *) echo "usage: $0 1.35|1.36|1.37|versions" >&2; exit 2 ;;
esac
