"""Run one bench: ``python -m bench <name> [args]``; ``python -m bench <name> --help`` for its arguments.

A bench is a module of this package with a top-level ``main(argv)``; the others (settings, urls, the
serving and counting helpers) are what the benches import. Django starts here, once, with
``bench.settings`` (the product's settings plus the naive endpoints), before the bench is imported.
"""

import ast
import importlib
import os
import sys
from pathlib import Path

import django

HERE = Path(__file__).resolve().parent


def benches() -> dict[str, str]:
    """Each bench's name and the first sentence of its docstring, read without importing it (nor Django)."""
    found = {}
    for path in sorted(HERE.glob("[!_]*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found[path.stem] = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
    return found


def usage() -> str:
    found = benches()
    width = max(map(len, found))
    rows = "\n".join(f"  {bench:<{width}}  {summary}" for bench, summary in found.items())
    return f"usage: python -m bench <name> [args]; the benches:\n{rows}"


name, *argv = sys.argv[1:] or [""]
if name in ("-h", "--help"):
    print(usage())
    sys.exit(0)
if name not in benches():
    print(f"no bench named {name!r}" if name else "name a bench", usage(), sep="\n", file=sys.stderr)
    sys.exit(2)
# Each bench's --help and errors name the command that ran it.
sys.argv[:] = [f"python -m bench {name}", *argv]
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
django.setup()
importlib.import_module(f"bench.{name}").main(argv)
