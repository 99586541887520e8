#!/usr/bin/env bash
# The container runtimes and tools the suite runs beside Debian 12's containerd 1.6, each at a pinned version.
# Prints the directory holding the binaries (put it first on PATH: containerd finds its shim there).
#
#   runtimes.sh containerd-1.7   Debian 13's package (1.7.24, NRI), extracted into .cache/containerd-nri
#   runtimes.sh containerd-2.1   Debian unstable's package (2.1.x), extracted into .cache/containerd-2.1
#   runtimes.sh containerd-2.4   containerd v2.4.2 (containerd, ctr, the runc shim) built from the Go module proxy
#   runtimes.sh crictl           sigs.k8s.io/cri-tools v1.37.0's crictl built from the Go module proxy
#   runtimes.sh cri-o            CRI-O v1.36.3 (crio, and its pinns from C) built from the module's source; it runs
#                                with Debian's conmon and runc
#   runtimes.sh versions         one line per runtime above that is present: name, version, where
#
# Go builds are cached outside the clone by name and version (~/.cache/kubecpu/upstream/NAME-VERSION, or
# $KUBECPU_UPSTREAM_CACHE), as is Go's own module cache: a version is built once per machine. Nothing is installed
# over the machine's packages, and nothing is added to /etc/apt or to apt's lists: Debian's other suites are read
# through lists of this script's own in a temporary directory. Safe to run again, and from several processes at once
# (a lock per runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
CONTAINERD2_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
CRIO_VERSION=v1.36.3  # the newest 1.36 the proxy serves (it lists no versions for cri-o: each was asked for by name)
cache=${KUBECPU_UPSTREAM_CACHE:-$HOME/.cache/kubecpu/upstream}
[[ -n $(command -v go) || ! -x /usr/local/go/bin/go ]] || PATH=/usr/local/go/bin:$PATH  # Go from its tarball, not on PATH

# Debian's package of another suite (trixie, sid), downloaded through apt with a source list, package lists and cache
# of its own in a temporary directory, removed afterwards: the machine's apt sources, pins and lists are left as they
# were (apt's configuration, a proxy included, still applies).
debian_containerd() {
  local suite=$1 dest=$2
  forget_old_sources "$suite"
  if [[ ! -x $dest/usr/bin/containerd ]]; then locked "debian-$suite"; fi
  if [[ -x $dest/usr/bin/containerd ]]; then
    echo "$(pwd)/$dest/usr/bin"
    return
  fi
  local work
  work=$(mktemp -d)
  trap "rm -rf '$work'" EXIT  # a failed download leaves nothing behind either
  local apt=(-q -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/sources.list.d"
             -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root")
  mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
    > "$work/sources.list"
  apt-get "${apt[@]}" update -qq >&2
  (cd "$work/deb" && apt-get "${apt[@]}" download "containerd/$suite") >&2
  rm -rf "$dest.tmp"
  mkdir -p "$dest.tmp"
  dpkg-deb -x "$work"/deb/containerd_*.deb "$dest.tmp"
  rm -rf "$work" "$dest"
  mv "$dest.tmp" "$dest"
  "$dest/usr/bin/containerd" --version >&2
  echo "$(pwd)/$dest/usr/bin"
}

# Before 2026-12-07 this script added the suite to /etc/apt (a source and a pin at priority 100): taken back, and
# apt's lists brought again without it.
forget_old_sources() {
  local suite=$1 file removed=""
  for file in "/etc/apt/sources.list.d/kubecpu-$suite.sources" "/etc/apt/preferences.d/kubecpu-$suite"; do
    if [[ -f $file && -w ${file%/*} ]]; then rm -f "$file"; removed=1; fi
  done
  if [[ -n $removed ]]; then apt-get update -qq >&2 || true; fi  # apt's own lock: a second one at once fails
}

# `go install PACKAGE@VERSION` for each package, static, into the cache (the module's own go.mod decides every
# dependency's version). Built into a temporary directory and renamed: a killed build leaves no half a cache.
# Go's module and build caches (GOMODCACHE, GOCACHE) are outside the clone too.
go_build() {
  local name=$1 version=$2 ldflags=$3
  shift 3
  local dest=$cache/$name-$version
  if [[ ! -f $dest/done ]]; then locked "$name"; fi
  if [[ -f $dest/done ]]; then
    echo "$dest/bin"
    return
  fi
  local work started
  work=$(mktemp -d "$cache/.build-XXXXXX")
  started=$SECONDS
  for package in "$@"; do
    CGO_ENABLED=0 GOBIN="$work/bin" GOFLAGS=-buildvcs=false go install -trimpath -tags "$GO_TAGS" \
      -ldflags "-s -w $ldflags" "$package@$version" >&2
  done
  echo "$name $version built in $((SECONDS - started)) s" >&2
  rm -rf "$dest"
  mv "$work" "$dest"
  touch "$dest/done"
  echo "$dest/bin"
}

# CRI-O: `go install` refuses it (its module's version list is not served, and go install asks it for deprecations),
# so its source is downloaded by version and built in place with its go.mod, without the parts that need C libraries
# (btrfs, devicemapper, gpgme, seccomp, SELinux, AppArmor; CGO_ENABLED=0); pinns is C, built with its Makefile.
crio_build() {
  local dest=$cache/cri-o-$CRIO_VERSION
  if [[ ! -f $dest/done ]]; then locked cri-o; fi
  if [[ -f $dest/done ]]; then
    echo "$dest/bin"
    return
  fi
  local work src started=$SECONDS
  work=$(mktemp -d "$cache/.build-XXXXXX")
  src=$(go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
  (cd "$work/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
     -tags "containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper containers_image_openpgp" \
     -ldflags "-s -w" -o "$work/bin/crio" ./cmd/crio) >&2
  make -s -C "$work/src/pinns" >&2
  cp "$work/src/bin/pinns" "$work/bin/pinns"
  rm -rf "$work/src"
  echo "cri-o $CRIO_VERSION built in $((SECONDS - started)) s" >&2
  rm -rf "$dest"
  mv "$work" "$dest"
  touch "$dest/done"
  echo "$dest/bin"
}

# Work on one runtime is done once at a time on this machine (the suite builds in the background while a test may
# ask for the same runtime): its own lock, taken only when it is not there yet, and looked for again under it.
locked() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock-$1"
  flock 9
}

case ${1:-} in
  containerd-1.7) debian_containerd trixie .cache/containerd-nri ;;
  containerd-2.1) debian_containerd sid .cache/containerd-2.1 ;;
  containerd-2.4)
    GO_TAGS="no_btrfs no_devmapper no_zfs no_aufs" go_build containerd "$CONTAINERD2_VERSION" \
      "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD2_VERSION" \
      github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 ;;
  crictl)
    GO_TAGS="" go_build crictl "$CRICTL_VERSION" "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
      sigs.k8s.io/cri-tools/cmd/crictl ;;
  cri-o) crio_build ;;
  versions)
    for bin in /usr/bin .cache/containerd-nri/usr/bin .cache/containerd-2.1/usr/bin \
        "$cache/containerd-$CONTAINERD2_VERSION/bin"; do
      [[ -x $bin/containerd ]] && echo "containerd $("$bin/containerd" --version | awk '{print $3}') $bin"
    done
    [[ -x $cache/cri-o-$CRIO_VERSION/bin/crio ]] && \
      echo "cri-o $("$cache/cri-o-$CRIO_VERSION/bin/crio" --version 2>/dev/null | awk 'NR == 1 {print $3}') $cache/cri-o-$CRIO_VERSION/bin"
    [[ -x $cache/crictl-$CRICTL_VERSION/bin/crictl ]] && \
      echo "crictl $("$cache/crictl-$CRICTL_VERSION/bin/crictl" --version | awk '{print $3}') $cache/crictl-$CRICTL_VERSION/bin"
    true ;;
  *) echo "usage: $0 containerd-1.7|containerd-2.1|containerd-2.4|crictl|cri-o|versions" >&2; exit 2 ;;
esac
