#!/usr/bin/env bash
# The product on the embedded SQLite default: migrate, seed the demo scenarios, serve the admin
# and the API on 127.0.0.1:$PORT (8000 unset), its static files by WhiteNoise, the metrics on
# 127.0.0.1:$METRICS_PORT (9108 unset), and run the background (a runner, a worker per demo queue and the webhook notifier).
set -euo pipefail
cd "$(dirname "$0")/.."

# The ports first, before anything is installed or written: a bad one stops the script in one line.
PORT="${PORT:-8000}"
METRICS_PORT="${METRICS_PORT:-9108}"
for name in PORT METRICS_PORT; do
  if [[ ! "${!name}" =~ ^[1-9][0-9]{0,4}$ ]] || (( ${!name} > 65535 )); then
    echo "run.sh: $name: '${!name}' is not a port number from 1 to 65535" >&2
    exit 2
  fi
done
if [ "$PORT" = "$METRICS_PORT" ]; then
  echo "run.sh: METRICS_PORT: $METRICS_PORT is PORT too; the metrics need a port of their own" >&2
  exit 2
fi

scripts/setup.sh runtime
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p var
source scripts/prepare.sh

# Stop the background with the server (Ctrl-C).
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
python manage.py weave_metrics --bind "127.0.0.1:$METRICS_PORT" &
python manage.py weave_runner &
python manage.py weave_notify &
python manage.py weave_worker --namespace demo --queue demo-tasks &
python manage.py weave_worker --namespace demo --queue demo-polls &
echo "admin: http://127.0.0.1:$PORT/admin/   API: http://127.0.0.1:$PORT/v1/   docs: http://127.0.0.1:$PORT/v1/docs/"
echo "metrics: http://127.0.0.1:$METRICS_PORT/metrics"
python manage.py runserver "127.0.0.1:$PORT" --noreload
