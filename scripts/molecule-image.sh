#!/usr/bin/env bash
# Builds the local systemd image the Molecule podman scenario runs (no registry is reachable): Debian 12 made with
# debootstrap, systemd as PID 1, python3 (and python3-yaml for the stand-in kubelet), and an SSH server: Ansible
# reaches the nodes over SSH with pipelining, as it reaches real nodes (one round trip a module; the podman connection
# costs three `podman exec` a module and no pipelining), through a port published on 127.0.0.1. Installs podman and
# debootstrap with apt-get when missing and adds the podman settings these machines need (ENVIRONMENT.md) to
# /etc/containers/containers.conf (--remove-settings takes them back).
# The image carries its recipe's digest as a label: a changed recipe rebuilds it, --rebuild always does. The key the
# nodes accept (mounted as root's authorized_keys) lives outside the clone, in ~/.cache/kubecpu/molecule.
set -euo pipefail
image=${KUBECPU_MOLECULE_IMAGE:-localhost/kubecpu-debian12-systemd:latest}
key_dir=$HOME/.cache/kubecpu/molecule
packages=systemd,systemd-sysv,python3,python3-yaml,dbus,procps,openssh-server
sshd_settings='PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nUseDNS no\nMaxStartups 50\n'
recipe=$(printf '%s\n%s\n' "$packages" "$sshd_settings" | sha256sum | cut -c1-16)
mkdir -p "$key_dir"
exec 9>"$key_dir/image.lock"  # one build at a time: Molecule's and the quick start test's may start together
flock 9
# podman's settings for these machines, appended to /etc/containers/containers.conf; `molecule-image.sh
# --remove-settings` takes exactly them back (scripts/test.sh does at its end when the run added them)
conf=/etc/containers/containers.conf
settings='# kubecpu molecule settings (ENVIRONMENT.md): runc, cgroupfs, file events, ulimits the machine allows
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
'
if [[ ${1:-} == --remove-settings ]]; then
  if [[ -f $conf ]] && grep -qF "${settings%%$'\n'*}" "$conf"; then
    kept=$(cat "$conf"; echo .)  # the dot keeps the file's last newlines through $( )
    kept=${kept%.}
    kept=${kept/"$settings"/}
    if [[ -z ${kept//[[:space:]]/} ]]; then rm -f "$conf"; else printf '%s' "$kept" > "$conf"; fi
    echo "molecule settings: taken back from $conf"
  fi
  exit 0
fi
missing=()
for pkg in podman debootstrap; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! grep -qsF "${settings%%$'\n'*}" "$conf"; then
  mkdir -p /etc/containers
  printf '%s' "$settings" >> "$conf"
fi
if [[ ! -f $key_dir/id_ed25519 ]]; then
  ssh-keygen -q -t ed25519 -N '' -C kubecpu-molecule -f "$key_dir/id_ed25519"
fi
if [[ ${1:-} != --rebuild ]] && podman image exists "$image" &&
   [[ $(podman image inspect --format '{{ index .Labels "kubecpu.recipe" }}' "$image") == "$recipe" ]]; then
  echo "molecule image: $image (kept, recipe $recipe)"
  exit 0
fi
root=$(mktemp -d /tmp/kubecpu-rootfs.XXXXXX)
trap 'rm -rf "$root" "$root.log"' EXIT  # debootstrap's log too: nothing left in /tmp
debootstrap --variant=minbase --include="$packages" bookworm "$root" \
  >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
printf "$sshd_settings" > "$root/etc/ssh/sshd_config.d/kubecpu.conf"
tar -C "$root" -c . | podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL kubecpu.recipe=$recipe" - "$image" >/dev/null
echo "molecule image: $image (built, recipe $recipe)"
