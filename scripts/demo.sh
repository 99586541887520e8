#!/usr/bin/env bash
# The main job on an embedded default: discover this node's CPU topology and show what the kubelet's
# static policy gives a sample set of pods. Needs only python3 (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
fi
exec bin/kubecpu demo "$@"
