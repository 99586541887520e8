#!/usr/bin/env bash
# containerd 1.7.24 with NRI for the NRI plugin's tests: Debian 13's package, run from a scratch directory on this
# Debian 12 machine (nothing is installed over Debian 12's containerd 1.6). Adds the trixie suite to apt at a low
# priority (100: never chosen on its own), downloads the package and unpacks it into .cache/containerd-nri.
# Prints the directory holding the binaries. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/containerd-nri
if [[ -x $dest/usr/bin/containerd ]]; then
  echo "$(pwd)/$dest/usr/bin"
  exit 0
fi
if [[ ! -f /etc/apt/sources.list.d/kubecpu-trixie.sources ]]; then
  cat > /etc/apt/sources.list.d/kubecpu-trixie.sources <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' > /etc/apt/preferences.d/kubecpu-trixie
  apt-get update -qq >&2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q containerd/trixie) >&2
mkdir -p "$dest"
dpkg-deb -x "$work"/containerd_*.deb "$dest"
"$dest/usr/bin/containerd" --version >&2
echo "$(pwd)/$dest/usr/bin"
