#!/usr/bin/env bash
# The whole test suite: lint, then pytest on SQLite and on MariaDB.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint"
ruff check .
ruff format --check .
lint-imports

echo "== tests on SQLite"
WEAVE_DATABASE_URL="sqlite:///$PWD/var/test.sqlite3" pytest -n 2 "$@"

echo "== tests on MariaDB"
if scripts/mariadb.sh; then
  WEAVE_DATABASE_URL="mysql://root@127.0.0.1:3306/weave" pytest -n 2 "$@"
elif [ "${CI:-}" = true ]; then
  echo "MariaDB is required under CI=true" >&2
  exit 1
else
  echo "MariaDB lane SKIPPED: no server (install mariadb-server or run as root)" >&2
  exit 1
fi
