#!/usr/bin/env bash
# Builds the local systemd image the Molecule podman scenario runs (no registry is reachable): Debian 12 made with
# debootstrap, systemd as PID 1, python3 (and python3-yaml for the stand-in kubelet). Installs podman and
# debootstrap with apt-get when missing and writes the podman settings these machines need (ENVIRONMENT.md).
# Safe to run again: an existing image is kept unless --rebuild is given.
set -euo pipefail
image=${KUBECPU_MOLECULE_IMAGE:-localhost/kubecpu-debian12-systemd:latest}
missing=()
for pkg in podman debootstrap; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
conf=/etc/containers/containers.conf
if ! grep -q '^# kubecpu molecule settings' "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  cat >> "$conf" <<'CONF'
# kubecpu molecule settings (ENVIRONMENT.md): runc, cgroupfs, file events, ulimits the machine allows
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
if [[ ${1:-} != --rebuild ]] && podman image exists "$image"; then
  echo "molecule image: $image (kept)"
  exit 0
fi
root=$(mktemp -d /tmp/kubecpu-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=systemd,systemd-sysv,python3,python3-yaml,dbus,procps bookworm "$root" \
  >/tmp/kubecpu-debootstrap.log 2>&1 || { tail -20 /tmp/kubecpu-debootstrap.log; exit 1; }
tar -C "$root" -c . | podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >/dev/null
echo "molecule image: $image (built)"
