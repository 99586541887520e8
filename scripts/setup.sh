#!/usr/bin/env bash
# Installs what the tests need on Debian 12 (as root): system packages when missing, then the project
# virtual environment .venv with the pinned tools of requirements-dev.txt. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v git >/dev/null 2>&1 || missing+=(git)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements-dev.sha256
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing pinned tools (requirements-dev.txt; pip's output in .venv/pip.log)"
  if ! .venv/bin/python -m pip install --disable-pip-version-check --no-compile -r requirements-dev.txt > .venv/pip.log 2>&1; then
    tail -n 30 .venv/pip.log >&2
    echo "setup: pip could not install requirements-dev.txt (whole output: .venv/pip.log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi

# ansible-playbook, ansible-lint and Molecule find the collection through this symlink tree (the checkout itself).
mkdir -p .cache/collections/ansible_collections/kubecpu
[[ -L .cache/collections/ansible_collections/kubecpu/cpu_manager ]] || ln -s "$(pwd)" .cache/collections/ansible_collections/kubecpu/cpu_manager

# ansible-test builds virtual environments with a pip bootstrap script it downloads from the internet;
# this offline stand-in bootstraps pip from the interpreter instead (ENVIRONMENT.md).
mkdir -p "$HOME/.ansible/test/cache"
cp scripts/ansible-test-offline.py "$HOME/.ansible/test/cache/get_pip_24_2.py"
# sed reads all of ansible's output: head would close the pipe early and ansible die of a BrokenPipeError
echo "setup: ready (.venv: $(.venv/bin/python --version), $(.venv/bin/ansible --version | sed -n 1p))"
