#!/usr/bin/env bash
# The whole test suite: set-up, ruff, mypy, yamllint, the collection built and installed from a requirements.yml, its
# docsite, unit/property/reliability tests, ansible-test sanity, integration tests, Molecule, the guest stage and a quick
# run of the benchmarks (they must keep working). Exits non-zero on the first failing stage. What it installs or
# changes outside the clone: CONTRIBUTING.md.
set -euo pipefail
# The suite's Python processes keep their bytecode (__pycache__ is ignored by git and by the collection's build): an
# environment that sets PYTHONDONTWRITEBYTECODE makes every bin/kubecpu, agent and pytest worker compile the core
# again (2026-12-02: bin/kubecpu topology 0.28 s with it, 0.14 s without)
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
root=$(pwd)
started=$SECONDS
cpu_at_start=$(head -1 /proc/stat)  # the machine's CPU time by kind (the timings table says how busy it was)
work="" installed="" sanity_log="" molecule_log="" runtimes_log="" docs_log=""
guest_pid="" sanity_pid="" molecule_pid="" runtimes_pid="" docs_pid=""
# podman's settings for this machine, which scripts/molecule-image.sh adds to /etc/containers/containers.conf: taken
# back at the end when this run added them (CONTRIBUTING.md lists what the suite changes outside the clone)
podman_settings_added=""
grep -qsF '# kubecpu molecule settings' /etc/containers/containers.conf || podman_settings_added=1
# The timing table printed at the end of every run, passed or failed: each stage's seconds (a stage ends where the
# next begins), then the guest stage's groups and their parts (scripts/guest.py writes them to timings.tsv).
# Beside the seconds, the CPU seconds of each stage's processes: what a stage costs the guests beside it on a machine
# that is CPU-bound (bash reaps a background job when it ends: its CPU seconds count in the stage running then).
stage_names=() stage_starts=() stage_cpus=()
times_file=$(mktemp)
cpu=0
cpu_ms() {  # the CPU time (user + system, ms) of every child this shell has waited for, into $cpu
  local user sys total=0 part
  times > "$times_file"
  { read -r _ _; read -r user sys; } < "$times_file"
  for part in "$user" "$sys"; do
    [[ $part =~ ^([0-9]+)m([0-9]+)\.([0-9]{3})s$ ]] || return 0
    total=$(( total + BASH_REMATCH[1] * 60000 + 10#${BASH_REMATCH[2]} * 1000 + 10#${BASH_REMATCH[3]} ))
  done
  cpu=$total
}
stage() {
  cpu_ms
  stage_names+=("$1") stage_starts+=($((SECONDS - started))) stage_cpus+=("$cpu")
  shift
  printf '\n=== %s: %s  [%d s]\n' "${stage_names[-1]}" "$*" $((SECONDS - started))
}
timings_shown=""
timings() {
  [[ -z $timings_shown ]] || return 0
  timings_shown=1
  local end=$((SECONDS - started)) i next junit=()
  # the failed tests first (a long run is often read from its end): from the JUnit files written so far
  for i in tests/output/junit-integration.xml tests/output/guest/junit-guest-*.xml; do [[ -f $i ]] && junit+=("$i"); done
  ((${#junit[@]})) && { python3 scripts/failures.py "${junit[@]}" || true; }
  cpu_ms
  printf '\n--- timings (seconds; then the CPU seconds of its processes) ---\n'
  for i in "${!stage_names[@]}"; do
    next=${stage_starts[i + 1]:-$end}
    printf '%6d  %-16s %6d\n' $((next - stage_starts[i])) "${stage_names[i]}" $(( (${stage_cpus[i + 1]:-$cpu} - stage_cpus[i] + 500) / 1000 ))
  done
  if [[ -f tests/output/runtimes.tsv ]]; then
    printf '%6s  runtimes beside the above (built, or found in the cache):\n' ""
    while IFS=$'\t' read -r what seconds; do printf '%6s    %s\n' "$seconds" "$what"; done < tests/output/runtimes.tsv
  fi
  if [[ -f tests/output/benchmarks.tsv ]]; then
    printf '%6s  of the benchmarks (each script, --quick):\n' ""
    while IFS=$'\t' read -r what seconds; do printf '%6s    benchmarks/%s.py\n' "$seconds" "$what"; done < tests/output/benchmarks.tsv
  fi
  if [[ -f tests/output/guest/timings.tsv ]]; then
    printf '%6s  guest stage beside the above (its groups side by side; each part within its group):\n' ""
    while IFS=$'\t' read -r seconds what; do printf '%6s  %s\n' "$seconds" "$what"; done < tests/output/guest/timings.tsv
  fi
  printf '%6d  the whole suite\n' "$end"
  local u n s i w q sq st u2 n2 s2 i2 w2 q2 sq2 st2 total ran
  read -r _ u n s i w q sq st _ <<< "$cpu_at_start"
  read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ < /proc/stat
  total=$(( u2 + n2 + s2 + i2 + w2 + q2 + sq2 + st2 - u - n - s - i - w - q - sq - st ))
  if ((total > 0)); then  # a busy machine is the suite's limit; time stolen by the hypervisor is the host's
    printf '%6s  the machine over the run (%d CPUs): %d%% busy, %d%% idle, %d%% stolen by its hypervisor\n' "" \
      "$(nproc)" $(( 100 * (u2 + n2 + s2 + q2 + sq2 - u - n - s - q - sq) / total )) \
      $(( 100 * (i2 + w2 - i - w) / total )) $(( 100 * (st2 - st) / total ))
    # a machine that is itself a guest can be paused whole (2026-12-01: 222 s of a run): its clock goes on, its
    # CPUs count nothing
    ran=$(( total / ($(nproc) * $(getconf CLK_TCK)) ))
    if ((end - ran > 10)); then
      printf '%6d  seconds of the run the machine did not run at all (paused by its hypervisor)\n' $((end - ran))
    fi
  fi
}
# collect PID_VARIABLE LOG WHAT: a stage started in the background waited for (its PID variable emptied, so that the
# trap leaves it be), its output printed, the suite failed with its exit code
collect() {
  local -n pid_of=$1
  local code=0
  wait "$pid_of" || code=$?
  pid_of=""
  cat "$2"
  if ((code)); then echo "$3 failed (exit $code)"; exit 1; fi
}
# the guest stage runs beside the others; on any exit it is stopped (it stops its QEMUs itself on SIGTERM)
# (the failing stage's exit code is kept: under set -e the stopped guest stage's 143 from wait became the suite's)
trap 'code=$?; if [[ -n $guest_pid ]] && kill "$guest_pid" 2>/dev/null; then wait "$guest_pid" || true; fi
      if [[ -n $runtimes_pid ]] && kill "$runtimes_pid" 2>/dev/null; then wait "$runtimes_pid" || true; fi
      if [[ -n $sanity_pid ]] && kill "$sanity_pid" 2>/dev/null; then wait "$sanity_pid" || true; fi
      if [[ -n $docs_pid ]] && kill "$docs_pid" 2>/dev/null; then wait "$docs_pid" || true; fi
      if [[ -n $molecule_pid ]] && kill -- "-$molecule_pid" 2>/dev/null; then wait "$molecule_pid" || true
        podman rm -f -t 0 kubecpu-kubelet-node kubecpu-agent-node >/dev/null 2>&1 || true; fi
      if [[ -n $podman_settings_added ]]; then bash scripts/molecule-image.sh --remove-settings || true; fi
      rm -rf ${work:+"$work"} ${installed:+"$installed"} ${sanity_log:+"$sanity_log"} ${molecule_log:+"$molecule_log"} ${runtimes_log:+"$runtimes_log"} ${docs_log:+"$docs_log"}
      timings; rm -f "$times_file"; exit $code' EXIT

stage packages "system packages: python3 (the guest stage starts before the virtual environment), containerd, runc, busybox-static, podman and conmon (CRI-O runs with them), gcc and make (CRI-O's pinns), debootstrap, chromium, qemu-system-x86, e2fsprogs (apt-get when missing)"
missing=()
for pkg in python3 containerd runc busybox-static podman conmon gcc make libc6-dev debootstrap chromium qemu-system-x86 e2fsprogs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's containerd 1.7.24 and 2.1.9, extracted into the checkout: the integration tests' and the guest's (shared in)
bash scripts/runtimes.sh containerd-1.7 >/dev/null
bash scripts/runtimes.sh containerd-2.1 >/dev/null

stage runtimes-start "the built runtimes started in the background (scripts/runtimes.sh): crictl 1.37.0, containerd 2.4.2 and CRI-O 1.36.3 from the Go module proxy (cached outside the clone by version); the integration tests wait for them; their output at the end"
runtimes_log=$(mktemp)
mkdir -p tests/output
rm -f tests/output/runtimes.tsv tests/output/runtimes.txt tests/output/benchmarks.tsv
(for name in crictl containerd-2.4 cri-o; do
   start=$SECONDS
   bash scripts/runtimes.sh "$name" >/dev/null
   printf '%s\t%d\n' "$name" $((SECONDS - start)) >> tests/output/runtimes.tsv
 done
 start=$SECONDS; bash scripts/peers.sh >/dev/null || echo "scripts/peers.sh failed: benchmarks/peers.py measures kubecpu alone"; printf 'peers\t%d\n' $((SECONDS - start)) >> tests/output/runtimes.tsv
 bash scripts/runtimes.sh versions > tests/output/runtimes.txt) > "$runtimes_log" 2>&1 &
runtimes_pid=$!

stage guest-start "guest stage started in the background: a real server (QEMU: 2 sockets x 2 cores x 2 threads, 2 NUMA nodes, cgroup v2, systemd); the guests boot and their own tests run beside the next stages (CRI-O and the kubelets 1.35.4, 1.36.3 and 1.37.2 built for them, or found in the cache), the host-side tests wait for the virtual environment and the built collection (tests/output/guest/ready.json, written after the build stage); its output at the end"
mkdir -p tests/output/guest
rm -f tests/output/guest/timings.tsv tests/output/guest/ready.json
python3 scripts/guest.py test --output tests/output/guest --ready tests/output/guest/ready.json \
  > tests/output/guest/stage.log 2>&1 &
guest_pid=$!

stage setup "the virtual environment and the pinned tools (scripts/setup.sh)"
setup_log=$(mktemp)
bash scripts/setup.sh 2>&1 | tee "$setup_log"
if grep -q Traceback "$setup_log"; then echo "setup printed a traceback"; exit 1; fi
rm -f "$setup_log"
export PATH="$root/.venv/bin:$PATH"

stage ruff "ruff"
ruff check plugins tests bin/kubecpu benchmarks scripts/lab.py scripts/guest.py scripts/guest_zipcache.py scripts/demo_node.py scripts/fleet.py scripts/failures.py extensions
stage mypy "plugins/module_utils"
mypy
stage yamllint "yamllint"
# changelogs/changelog.yaml is antsibull-changelog's, in its own layout, rewritten at each release
yamllint -s -d '{extends: default, ignore: [changelogs/changelog.yaml], rules: {line-length: {max: 160}, document-start: {present: true}}}' \
  galaxy.yml meta changelogs tests/integration/modules.yml tests/integration/crictl.yml roles playbooks extensions examples \
  docs/docsite
stage ansible-lint "at the collection root, as Galaxy's importer runs it (production profile, .ansible-lint)"
ANSIBLE_COLLECTIONS_PATH="$root/.cache/collections" ansible-lint --offline --profile production
stage changelog "antsibull-changelog lint"
antsibull-changelog lint

stage build "ansible-galaxy collection build, installed as users install it (ansible-galaxy collection install -r requirements.yml, the tarball as type file, offline) for the integration tests and Molecule"
installed=$(mktemp -d "${TMPDIR:-/tmp}/kubecpu-installed.XXXXXX")
ansible-galaxy collection build --force --output-path "$installed" . >/dev/null
printf -- '---\ncollections:\n  - name: %s\n    type: file\n' "$(ls "$installed"/kubecpu-cpu_manager-*.tar.gz)" \
  > "$installed/requirements.yml"
ansible-galaxy collection install --offline --force -r "$installed/requirements.yml" -p "$installed/collections" >/dev/null
export KUBECPU_COLLECTIONS_PATH="$installed/collections"
ls "$KUBECPU_COLLECTIONS_PATH/ansible_collections/kubecpu/cpu_manager/roles" "$installed"/kubecpu-cpu_manager-*.tar.gz
# the guest stage's host-side tests may start now: this interpreter, the built collection (written whole, then renamed)
python - <<'PY'
import json, os, sys
ready = "tests/output/guest/ready.json"
with open(ready + ".tmp", "w", encoding="utf-8") as handle:
    json.dump({"python": sys.executable, "env": {name: os.environ[name] for name in ("PATH", "KUBECPU_COLLECTIONS_PATH")}},
              handle)
os.replace(ready + ".tmp", ready)
PY

stage docs-start "the docsite started in the background (scripts/docsite.py): antsibull-docs lints the installed collection's documentation (modules, role argument specs, docs/docsite) and builds its pages into tests/output/docsite, one for every module, role and playbook; its output at the end"
docs_log=$(mktemp)
rm -rf tests/output/docsite
python scripts/docsite.py "$KUBECPU_COLLECTIONS_PATH/ansible_collections/kubecpu/cpu_manager" tests/output/docsite \
  > "$docs_log" 2>&1 &
docs_pid=$!

stage ee "execution environment: ansible-builder create with the built collection, and its requirements as introspect reads them"
ee="$installed/ee"
mkdir -p "$ee"
printf -- '---\nversion: 3\nimages:\n  base_image:\n    name: quay.io/ansible/awx-ee:latest\ndependencies:\n  galaxy:\n    collections:\n      - name: %s\n        type: file\n' \
  "$(ls "$installed"/kubecpu-cpu_manager-*.tar.gz)" > "$ee/execution-environment.yml"
ansible-builder create -f "$ee/execution-environment.yml" -c "$ee/context" >/dev/null
grep -q "kubecpu-cpu_manager-.*\.tar\.gz" "$ee/context/_build/requirements.yml"
ansible-builder introspect --sanitize "$KUBECPU_COLLECTIONS_PATH" > "$ee/dependencies.yml" 2>/dev/null
want="tar [platform:rpm platform:dpkg]  # from collection kubecpu.cpu_manager"
grep -qF "$want" "$ee/dependencies.yml" || { echo "the execution environment misses: $want"; cat "$ee/dependencies.yml"; exit 1; }
if grep -F "# from collection kubecpu.cpu_manager" "$ee/dependencies.yml" | grep -vF "$want"; then
  echo "the collection asks the execution environment for more than tar (it needs no Python package)"; exit 1
fi
echo "build context $ee/context names the collection; introspect finds its bindep.txt and no Python requirement"

stage units "ansible-test units: the unit, property and reliability tests (collection copied to ansible_collections/kubecpu/cpu_manager)"
work=$(mktemp -d "${TMPDIR:-/tmp}/kubecpu-ansible-test.XXXXXX")
dest="$work/ansible_collections/kubecpu/cpu_manager"
mkdir -p "$dest" tests/output
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$dest"
ln -s "$(cd "${KUBECPU_SHARED:-$root/../shared}" && pwd)" "$work/ansible_collections/kubecpu/shared"  # the kubelet cases
(cd "$dest" && ansible-test units --python 3.11 --venv --requirements --color no)

stage sanity-start "ansible-test sanity (offline, on the same copy) started in the background: static checks, beside the next stages; its output at the end"
sanity_log=$(mktemp)
(cd "$dest" && ansible-test sanity --python 3.11 --venv --color no) > "$sanity_log" 2>&1 &
sanity_pid=$!

# Molecule waits on its nodes (SSH round trips, systemd, the stand-in kubelet's health) more than it computes: it runs
# beside the integration tests (they share nothing: podman nodes there, the lab's containerd and temporary trees here)
# in a session of its own (a failure elsewhere kills all of it; the trap removes its nodes), its output at the end
stage molecule-start "Molecule started in the background (its node image first, built when its recipe is new): podman scenario (systemd nodes: both roles, rollout, idempotence, testinfra), then the localhost scenario; its output at the end"
# the nodes' SSH ports on 127.0.0.1 (extensions/molecule/podman/molecule.yml): two the kernel has free now
read -r KUBECPU_MOLECULE_PORT_KUBELET KUBECPU_MOLECULE_PORT_AGENT < <(python - <<'PY'
import socket
probes = [socket.socket() for _ in range(2)]
for probe in probes:
    probe.bind(("127.0.0.1", 0))
print(*(probe.getsockname()[1] for probe in probes))
PY
)
export KUBECPU_MOLECULE_PORT_KUBELET KUBECPU_MOLECULE_PORT_AGENT
molecule_log=$(mktemp)
ANSIBLE_COLLECTIONS_PATH="$KUBECPU_COLLECTIONS_PATH" \
  setsid bash -c 'bash scripts/molecule-image.sh && cd extensions && molecule test -s podman && molecule test -s localhost' \
  > "$molecule_log" 2>&1 &
molecule_pid=$!  # setsid's own process (a background job is no group leader): its session's process group

stage runtimes-wait "the other runtimes: waiting for their builds, then their output"
collect runtimes_pid "$runtimes_log" "the runtimes' builds"
cat tests/output/runtimes.txt

# Container cgroups that runtimes killed before their lab's teardown left below kubepods (a session's processes are ended
# before CI runs): the fail-closed hook moves every container cgroup on CPUs it makes exclusive, and its tests count
# them. rmdir removes only cgroups without tasks or children; nothing is touched while a real kubelet runs here.
if ! pgrep -x kubelet >/dev/null; then
  for top in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    if [[ -d $top ]]; then find "$top" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
fi
stage integration "integration tests against real runtimes: containerd 1.6, 1.7.24, 2.1.9, 2.4.2, CRI-O 1.36.3 and a real crictl (bin/kubecpu reconcile, the agent, the NRI plugin, the hook, the modules)"
python -m pytest -q --junitxml=tests/output/junit-integration.xml tests/integration

# the benchmarks' quick run (they must keep working; their figures come from full runs on a quiet host) while Molecule
# still waits on its nodes
stage benchmarks "benchmarks (quick run)"
for bench in allocation state reconcile fleet defrag housekeeping hook hook_lock peers; do
  start=$SECONDS
  python "benchmarks/$bench.py" --quick
  printf '%s\t%d\n' "$bench" $((SECONDS - start)) >> tests/output/benchmarks.tsv
done

stage docs-wait "the docsite: waiting for it, then its output"
collect docs_pid "$docs_log" "the docsite"

stage molecule-wait "Molecule: waiting for it, then its output"
collect molecule_pid "$molecule_log" Molecule

stage sanity-wait "ansible-test sanity: waiting for it, then its output"
collect sanity_pid "$sanity_log" "ansible-test sanity"

stage guest-wait "the guest stage: waiting for it, then its output"
collect guest_pid tests/output/guest/stage.log "the guest stage"
bash scripts/kubelet.sh versions | tee tests/output/guest/kubelets.txt  # the kubelets it built (or found) and ran

timings  # before the closing line, which stays the last one
UNIT_JUNIT="$dest/tests/output/junit" python - <<'PY'
import glob
import os
import xml.etree.ElementTree as ET
tests = failures = errors = skipped = 0
for name in (sorted(glob.glob(os.environ["UNIT_JUNIT"] + "/*-units.xml")) + ["tests/output/junit-integration.xml"]
             + sorted(glob.glob("tests/output/guest/junit-guest-*.xml"))):
    root = ET.parse(name).getroot()
    for suite in [root] if root.tag == "testsuite" else root.findall("testsuite"):
        counts = [int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")]
        tests, failures, errors, skipped = (a + b for a, b in zip((tests, failures, errors, skipped), counts))
print("\nall stages passed")
print("pytest: %d passed, %d failed, %d skipped" % (tests - failures - errors - skipped, failures + errors, skipped))
PY
