#!/usr/bin/env bash
# The cluster lane: a three-node Galera cluster (scripts/galera.sh); the concurrency, race, fault and
# reliability tests with connections spread over its nodes (node kills and a partition included); then the
# whole MariaDB lane against one node. Arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"
scripts/galera.sh start
trap 'scripts/galera.sh stop' EXIT
export WEAVE_GALERA="$PWD/scripts/galera.sh"

CLUSTER_URL="$(scripts/galera.sh url weave)"
echo "== spread over three nodes"
WEAVE_DATABASE_URL="$CLUSTER_URL" pytest -n 2 --dist worksteal tests/reliability tests/engine/test_concurrency.py \
  tests/engine/test_certifiable.py tests/engine/test_faults.py tests/recovery/test_faults.py tests/core/test_cluster_connect.py \
  --deselect tests/reliability/test_cluster_faults.py "$@"
echo "== node kills and a partition under load (alone: the nodes it stops would stop the other tests too)"
WEAVE_DATABASE_URL="$CLUSTER_URL" pytest tests/reliability/test_cluster_faults.py "$@"
scripts/galera.sh counts

echo "== the whole MariaDB lane on node 1"
WEAVE_DATABASE_URL="mysql://root@127.0.0.1:3311/weave" pytest -n 2 --dist worksteal "$@"
scripts/galera.sh counts
