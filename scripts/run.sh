#!/usr/bin/env bash
# The product on the embedded SQLite default: migrate, seed the demo scenarios, serve the admin
# and the API on 127.0.0.1:8000, and run the background (a runner and a worker per demo queue).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh runtime
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p var
# The demo's secret key: made once, kept in var/ (never committed), readable by this user only.
if [ -z "${WEAVE_SECRET_KEY:-}" ]; then
  if [ ! -s var/secret_key ]; then
    (umask 077 && python -c 'import secrets; print(secrets.token_urlsafe(50))' > var/secret_key)
  fi
  WEAVE_SECRET_KEY="$(cat var/secret_key)"
  export WEAVE_SECRET_KEY
fi
echo "== migrating the database"
python manage.py migrate --no-input -v0
# Seeds the scenarios on the first run; later runs list the ones already there.
echo "== the demo scenarios"
python manage.py weave_demo
# The login and token are kept in var/ and shown again while they still work against this database.
echo "== the operator's login and API token"
python manage.py weave_bootstrap --namespace demo --actor operator --workflow-audit-access --recover-access \
  --admin-user admin --group operators --group auditors --reset-password --remember var/demo_login.json
# A second person, to approve what an approval policy holds back (four eyes).
python manage.py weave_bootstrap --namespace demo --actor approver --admin-user approver --group approvers --no-token \
  --reset-password --remember var/demo_approver.json

# Every process writes its metrics here; weave_metrics adds them up (a fresh directory per run).
export PROMETHEUS_MULTIPROC_DIR="$PWD/var/metrics"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

# Stop the background with the server (Ctrl-C).
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
python manage.py weave_metrics --bind 127.0.0.1:9108 &
python manage.py weave_runner &
python manage.py weave_worker --namespace demo --queue demo-tasks &
python manage.py weave_worker --namespace demo --queue demo-polls &
echo "admin: http://127.0.0.1:8000/admin/   API: http://127.0.0.1:8000/v1/   docs: http://127.0.0.1:8000/v1/docs/"
echo "metrics: http://127.0.0.1:9108/metrics"
python manage.py runserver 127.0.0.1:8000 --noreload --insecure
