#!/usr/bin/env bash
# The whole test suite: lint, then pytest on SQLite and on MariaDB, then the races on a three-node Galera
# cluster with their clients spread over the nodes (make test-cluster runs the whole cluster lane). Workers steal
# tests from each other (--dist worksteal): the few long subprocess tests do not leave one worker idle at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint"
ruff check .
ruff format --check .
lint-imports
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir var/site
# Every model change has its migration (the test settings make a key for the run; nothing is written).
WEAVE_DATABASE_URL="sqlite://:memory:" DJANGO_SETTINGS_MODULE=weave_site.settings_test \
  python manage.py makemigrations --check --dry-run

echo "== tests on SQLite"
WEAVE_DATABASE_URL="sqlite:///$PWD/var/test.sqlite3" pytest -n 2 --dist worksteal "$@"

echo "== tests on MariaDB"
if scripts/mariadb.sh; then
  # The browser tests drive the console's pages through the same services this lane runs directly: once, on
  # SQLite, keeps the suite's time down.
  WEAVE_DATABASE_URL="mysql://root@127.0.0.1:3306/weave" pytest -n 2 --dist worksteal --ignore=tests/browser "$@"
elif [ "${CI:-}" = true ]; then
  echo "MariaDB is required under CI=true" >&2
  exit 1
else
  echo "MariaDB lane SKIPPED: no server (install mariadb-server or run as root)" >&2
  exit 1
fi

echo "== the races on a three-node Galera cluster"
if [ "$(id -u)" = 0 ] || { [ -f /usr/lib/galera/libgalera_smm.so ] && command -v rsync >/dev/null; }; then
  scripts/galera.sh start
  trap 'scripts/galera.sh stop' EXIT
  WEAVE_DATABASE_URL="$(scripts/galera.sh url weave)" pytest -n 2 --dist worksteal tests/reliability/test_races.py \
    tests/engine/test_concurrency.py tests/engine/test_certifiable.py tests/core/test_cluster_connect.py "$@"
  scripts/galera.sh counts
elif [ "${CI:-}" = true ]; then
  echo "the Galera cluster is required under CI=true" >&2
  exit 1
else
  echo "Galera lane SKIPPED: galera-4 and rsync are missing (run as root to install them)" >&2
fi
