#!/usr/bin/env bash
# The main job on an embedded default: a real local node. As root on Debian 12 it installs what the demo uses
# (containerd, runc, busybox-static: nothing else, no virtual environment; the core is standard-library Python),
# starts a throwaway containerd with a few kubelet-like pods, lets kubecpu pin them, prints which container got which
# CPUs (read back from cgroupfs and /proc) and tears everything down. Where it cannot (no root, no apt), it says why
# and shows the embedded demo: this node's topology and what the static policy gives sample pods, in the same table.
set -euo pipefail
cd "$(dirname "$0")/.."
fallback() {
  echo "demo: $1; showing the embedded demo instead" >&2
  if ! command -v python3 >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  exec bin/kubecpu demo
}
[[ $(id -u) == 0 ]] || fallback "a real node needs root"
command -v apt-get >/dev/null 2>&1 || fallback "no apt-get to install containerd"
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
for pkg in containerd runc busybox-static; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "demo: installing ${missing[*]} (apt-get)"
  log=$(mktemp)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$log"
    fallback "apt-get could not install ${missing[*]}"
  fi
  rm -f "$log"
fi
python3 scripts/demo_node.py || fallback "the real node demo failed (see above)"
