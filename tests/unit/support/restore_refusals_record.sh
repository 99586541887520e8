#!/usr/bin/env bash
# Records what the real kubelets say for each generated cpu_manager_state file, into restore_refusals_kubelet.json
# beside this script (the test table of tests/unit/plugins/module_utils/kubelet/test_checkpoint_formats.py reads it).
#
#   tests/unit/support/restore_refusals_record.sh        from the repository root; Go on PATH, the Go module proxy
#
# For each pinned release (1.35.4, 1.36.3, 1.37.2, the ones scripts/kubelet.sh builds): a scratch module requires
# k8s.io/kubernetes at the release, its staging modules replaced by the published k8s.io/X at v0.Y.Z (as
# scripts/kubelet.sh does), and builds restore_refusals_oracle.go, which calls the kubelet's own
# state.NewCheckpointState on each file. It runs once per feature-gate setting that changes the restore. The files
# come from restore_refusals.py (its "cases" command); restore_refusals.py's "record" command writes the JSON.
# 1.38 has no release Go 1.26 builds (v1.38.0-beta.0 needs Go 1.27); its state and checkpointmanager packages are
# byte for byte 1.37.2's, so the 1.38 rows are 1.37.2's answers (the JSON says so). Takes some minutes on a cold
# module cache; nothing here runs in the test suite.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
[[ -n $(command -v go) || ! -x /usr/local/go/bin/go ]] || PATH=/usr/local/go/bin:$PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/collections/ansible_collections/kubecpu"
ln -s "$root" "$work/collections/ansible_collections/kubecpu/cpu_manager"
export PYTHONPATH=$work/collections
module=ansible_collections.kubecpu.cpu_manager.tests.unit.support.restore_refusals
"$python" -m "$module" cases >"$work/cases.json"

build() {  # release -> $work/oracle-<release>
  local version=$1 staging=v0.${1#v1.} dir=$work/mod-$1 src
  mkdir -p "$dir"
  cp "$here/restore_refusals_oracle.go" "$dir/main.go"
  (
    cd "$dir"
    go mod init kubecpu.test/restore-refusals >/dev/null 2>&1
    src=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    local replaces=()
    while read -r staged; do
      replaces+=("-replace=$staged=$staged@$staging")
    done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9.-]*\) => \./staging/src/.*#\1#p' "$src/go.mod")
    go mod edit "-require=k8s.io/kubernetes@$version" "${replaces[@]}"
    GOFLAGS=-mod=mod go get "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state@$version"
    CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$work/oracle-$version" .
  ) >&2
}

runs=()
for version in v1.35.4 v1.36.3 v1.37.2; do
  build "$version"
done
for run in "v1.35.4 1.35 -" "v1.36.3 1.36 -" "v1.36.3 1.36 PodLevelResourceManagers=true" "v1.37.2 1.37 -" \
  "v1.37.2 1.37 PodLevelResourceManagers=true,InPlacePodVerticalScalingExclusiveCPUs=true"; do
  read -r version minor gates <<<"$run"
  out=$work/out-$version-${gates//[=,]/_}.json
  if [[ $gates == - ]]; then
    "$work/oracle-$version" <"$work/cases.json" >"$out"
  else
    "$work/oracle-$version" -gates "$gates" <"$work/cases.json" >"$out"
  fi
  src=$(cd "$work/mod-$version" && go mod download -json "k8s.io/kubernetes@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  utils=$(cd "$work/mod-$version" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/utils)
  runs+=("$version" "$minor" "$gates" "$out" "$src" "$utils")
done
GOROOT_FOR_SOURCES=$(go env GOROOT) "$python" -m "$module" record "$here/restore_refusals_kubelet.json" "$(go env GOVERSION)" "${runs[@]}"
