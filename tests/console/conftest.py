import pytest
from django.contrib.auth.models import Group, User

from history.models import Operator
from history.tenancy import actor_id_for


@pytest.fixture
def console_user(tenancy):
    """console_user("name", "operators") → a logged-in-able staff user acting in the test namespace."""
    namespace = tenancy[0]

    def make(name: str, *groups: str, queues="*"):
        user = User.objects.create_user(name, password="pw", is_staff=True)
        user.groups.set(Group.objects.filter(name__in=groups))
        actor_id = actor_id_for(namespace.name, name)  # as weave_bootstrap names a login's actor
        Operator.objects.create(user=user, namespace=namespace, actor_id=actor_id, queue_access=queues)
        return user

    return make
