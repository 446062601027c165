"""What the engine's command services share beyond ``core.fields`` and ``history.idempotency``."""

import re
from typing import Any

from core import fields, limits
from core.errors import NotFound
from core.fields import command_object, is_text  # noqa: F401 - the names the engine's modules import
from core.identity import Identity
from history.models import WorkflowDefinition, WorkflowInstance

# The Idempotency-Key syntax as the OpenAPI document states it (history.idempotency.key_check decides).
IDEMPOTENCY_KEY = re.compile(f"[\\x21-\\x7e]{{1,{limits.MAX_IDEMPOTENCY_KEY}}}")


def id_argument(value: Any, field: str) -> str:
    """An id from a path or a command (the argument order of the engine's call sites)."""
    return fields.identifier(field, value)


def instance_visible(*, identity: Identity, instance_id: str) -> tuple[WorkflowInstance, WorkflowDefinition]:
    """The instance in the caller's namespace behind accessible queues, else NOT_FOUND (unlocked read)."""
    instance = WorkflowInstance.objects.filter(pk=instance_id, namespace_id=identity.namespace_id).first()
    definition = WorkflowDefinition.objects.filter(pk=instance.definition_id).first() if instance else None
    if definition is None or not identity.can_access_queues(definition.queues):
        raise NotFound(f"workflow {instance_id} not found")
    return instance, definition
