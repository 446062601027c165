.PHONY: run serve test test-cluster lint format integration docs

# make run PORT=8080 METRICS_PORT=9200: make puts a variable set on its command line in the recipe's environment,
# where scripts/run.sh reads it (a bad port stops it before anything runs).
run:  ## the demo on the embedded SQLite: migrate, seed, serve admin + API on PORT (8000), metrics on METRICS_PORT (9108), run the background
	scripts/run.sh

serve:  ## the production process model on MariaDB: gunicorn, the runner, workers and metrics under honcho (Procfile)
	scripts/serve.sh

test:  ## lint and the suite on SQLite and on MariaDB (the browser tests on SQLite only), the races on Galera
	scripts/test.sh

test-cluster:  ## the cluster lane: reliability tests spread over three Galera nodes, faults, the MariaDB lane on one
	scripts/test_cluster.sh

lint:  ## ruff, and the import-linter layer contract (pyproject.toml)
	scripts/setup.sh dev && .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/lint-imports

format:
	scripts/setup.sh dev && .venv/bin/ruff check --fix . && .venv/bin/ruff format .

integration:  ## the SDK end to end against a live server, and the runnable examples
	scripts/setup.sh dev && .venv/bin/pytest tests/sdk/test_live.py tests/test_examples.py

docs:  ## the documentation site (MkDocs) on 127.0.0.1:8001, rebuilt on every save
	scripts/setup.sh dev && NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve -a 127.0.0.1:8001
