"""Namespaces, applications and queues: find or create by name."""

import hashlib
import re

from django.db import transaction

from history.models import Application, Namespace, Queue

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")


def is_name(value: str) -> bool:
    return NAME_PATTERN.fullmatch(value) is not None


def actor_id_for(namespace: str, actor: str) -> str:
    """A stable 32-hex actor id for a human-readable actor name."""
    return hashlib.sha256(f"{namespace}\0{actor}".encode()).hexdigest()[:32]


@transaction.atomic
def namespace_ensure(*, name: str, application: str, queues: list[str]) -> tuple[Namespace, Application, list[Queue]]:
    namespace, _ = Namespace.objects.get_or_create(name=name)
    app, _ = Application.objects.get_or_create(namespace=namespace, name=application)
    queue_rows = [Queue.objects.get_or_create(namespace=namespace, name=q)[0] for q in sorted(set(queues))]
    return namespace, app, queue_rows
