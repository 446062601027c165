#!/usr/bin/env bash
# One host's production process model on MariaDB: gunicorn serving the admin and the API (static files by
# WhiteNoise), the runner, a worker per demo queue and the metrics exporter, each a Procfile line run by honcho.
# The database (WEAVE_DATABASE_URL, default the local server's `weave`) is created and migrated first, the demo
# scenarios seeded. Ctrl-C (or SIGTERM) stops every process gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh runtime
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p var
if [ -z "${WEAVE_DATABASE_URL:-}" ]; then
  scripts/mariadb.sh
  mysql --host=127.0.0.1 --user=root -e "CREATE DATABASE IF NOT EXISTS weave CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
  export WEAVE_DATABASE_URL="mysql://root@127.0.0.1:3306/weave"
fi
source scripts/prepare.sh
echo "admin: http://${WEAVE_BIND:-127.0.0.1:8000}/admin/   metrics: http://${WEAVE_METRICS_BIND:-127.0.0.1:9108}/metrics"
exec honcho start --no-colour -f Procfile
