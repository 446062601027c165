# Sourced by run.sh and serve.sh: the demo's secret key, the schema, the scenarios, the two logins, a fresh
# metrics directory shared by every process of the run, and the static files.
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
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$PWD/var/metrics}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

# WhiteNoise serves what collectstatic writes to var/static/ (hashed names), under runserver as under gunicorn.
echo "== collecting the static files"
python manage.py collectstatic --no-input -v0
