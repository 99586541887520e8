#!/usr/bin/env bash
# The main job on an embedded default: a real local node. As root on Debian 12 it installs what it needs
# (containerd, runc, busybox-static, the project venv with grpcio), starts a throwaway containerd with a few
# kubelet-like pods, lets kubecpu pin them, prints which container got which CPUs (read back from cgroupfs)
# and tears everything down. Where it cannot (no root, no apt), it says why and shows the embedded demo:
# this node's topology and what the static policy gives sample pods.
set -euo pipefail
cd "$(dirname "$0")/.."
fallback() {
  echo "demo: $1; showing the embedded demo instead" >&2
  if ! command -v python3 >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  exec bin/kubecpu demo
}
[[ $(id -u) == 0 ]] || fallback "a real node needs root"
command -v apt-get >/dev/null 2>&1 || fallback "no apt-get to install containerd"
missing=()
for pkg in containerd runc busybox-static; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "demo: installing ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
    fallback "apt-get could not install ${missing[*]}"
fi
bash scripts/setup.sh >/dev/null || fallback "the project environment could not be set up"
.venv/bin/python scripts/demo_node.py || fallback "the real node demo failed (see above)"
