"""A step's fixed result contract and a POLL step's fixed classification mapping.

Both live in the step's entry of the definition spec: ``contract`` is a JSON Schema that a
SUCCEEDED result (or signal payload) must satisfy (absent: any JSON); a POLL step's
``classification`` is ``{"field": <top-level key>, "values": {<value>: SUCCEEDED|FAILED|PENDING}}``.
"""

from functools import lru_cache

import jsonschema

from history import exactjson
from history.errors import InvalidArgument
from recovery.commands import ExactResult


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> jsonschema.protocols.Validator:
    schema = exactjson.to_python(exactjson.loads(schema_text))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def result_contract_check(*, spec: dict, result: ExactResult, field: str = "result") -> None:
    """Refuse a SUCCEEDED result that breaks the step's fixed contract."""
    contract = spec.get("contract")
    if contract is None:
        return
    validator = _validator(exactjson.dumps(contract))
    error = jsonschema.exceptions.best_match(validator.iter_errors(exactjson.to_python(result.value)))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise InvalidArgument(f"{field} breaks the step's result contract at {where}: {error.message}", field=field)


def poll_classify(*, spec: dict, value: object) -> str | None:
    """The business classification of a successful query result, or None when the mapping has no entry."""
    mapping = spec.get("classification") or {}
    if not isinstance(value, dict) or mapping.get("field") not in value:
        return None
    answer = value[mapping["field"]]
    if type(answer) is not str:
        answer = exactjson.dumps(answer)
    return (mapping.get("values") or {}).get(answer)
