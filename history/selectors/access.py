"""The parent checks every history read starts with."""

from history.errors import NotFound, Unavailable
from history.identity import Identity
from history.ids import ROOT_STEP_KEY
from history.models import Queue, Step, WorkflowDefinition, WorkflowInstance


def instance_get_readable(*, identity: Identity, instance_id: str) -> WorkflowInstance:
    """The instance, with its fixed definition loaded, if the identity may read it.

    Another namespace, a missing row and an inaccessible queue of the definition all look the
    same (NOT_FOUND): knowing an id proves nothing.
    """
    instance = WorkflowInstance.objects.filter(id=instance_id, namespace_id=identity.namespace_id).first()
    if instance is None:
        raise NotFound("workflow not found")
    definition = WorkflowDefinition.objects.filter(id=instance.definition_id).first()
    if definition is None or definition.namespace_id != instance.namespace_id:
        raise Unavailable("the workflow's definition is missing or belongs to another namespace")
    if not identity.can_access_queues(definition.queues):
        raise NotFound("workflow not found")
    instance.definition = definition
    return instance


def step_get_by_key(*, instance: WorkflowInstance, key: str) -> Step:
    """The logical step ``key`` of the instance's fixed definition (``$root`` is never one)."""
    spec = instance.definition.step_spec(key) if key != ROOT_STEP_KEY else None
    if spec is None:
        raise NotFound(f"step {key!r} is not a step of this workflow's definition")
    step = Step.objects.filter(instance_id=instance.id, key=key).first()
    if step is None or step.kind != spec["kind"]:
        raise Unavailable(f"step {key!r} has no row matching the definition")
    step.instance = instance
    return step


def fixed_queue_id(*, instance: WorkflowInstance, step: Step) -> str:
    """The id of the queue the fixed definition names for a TASK or POLL step."""
    name = instance.definition.step_spec(step.key).get("queue")
    queue_id = Queue.objects.filter(namespace_id=instance.namespace_id, name=name).values_list("id", flat=True).first()
    if queue_id is None:
        raise Unavailable(f"the queue of step {step.key!r} does not exist in this namespace")
    return queue_id
