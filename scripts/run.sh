#!/usr/bin/env bash
# The product on the embedded SQLite default: migrate, seed, serve admin + API on 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh runtime
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p var
python manage.py migrate --no-input -v0
python manage.py weave_bootstrap --namespace demo --actor operator --workflow-audit-access --recover-access \
  --admin-user admin --group operators --group auditors
echo "admin: http://127.0.0.1:8000/admin/   API: http://127.0.0.1:8000/v1/"
exec python manage.py runserver 127.0.0.1:8000 --noreload
