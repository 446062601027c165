#!/usr/bin/env bash
# Prepare a machine: system packages (when root), then the project's virtualenv.
# Usage: scripts/setup.sh [runtime|dev]
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-dev}"

system_packages=(mariadb-server libmariadb-dev pkg-config)
[ "$profile" = dev ] && system_packages+=(chromium)
if [ "$(id -u)" = 0 ] && command -v dpkg >/dev/null; then
  missing=()
  for pkg in "${system_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing the system packages ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# A tree that borrows another tree's virtualenv (a link, as the production stack's test makes) leaves it as its
# owner installed it: an editable install from here would point that virtualenv at this tree.
if [ -L .venv ]; then
  exit 0
fi

python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
requirements=requirements.txt
[ "$profile" = dev ] && requirements=requirements-dev.txt
stamp=.venv/.installed-$profile
inputs=(requirements.txt "$requirements")
[ -f sdk/pyproject.toml ] && inputs+=(sdk/pyproject.toml)
want=$(cat "${inputs[@]}" | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the virtualenv .venv"
  "$python" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the Python packages of $requirements (a minute or two the first time)"
  .venv/bin/pip install -q --disable-pip-version-check -r "$requirements"
  [ -f sdk/pyproject.toml ] && .venv/bin/pip install -q --disable-pip-version-check -e sdk
  echo "$want" > "$stamp"
fi
