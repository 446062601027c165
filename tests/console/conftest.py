import pytest
from django.contrib.auth.models import Group, User

from history.models import Operator


@pytest.fixture
def console_user(tenancy):
    """console_user("name", "operators") → a logged-in-able staff user acting in the test namespace."""
    namespace = tenancy[0]

    def make(name: str, *groups: str, queues="*"):
        user = User.objects.create_user(name, password="pw", is_staff=True)
        user.groups.set(Group.objects.filter(name__in=groups))
        Operator.objects.create(user=user, namespace=namespace, actor_id=name.ljust(32, "0")[:32], queue_access=queues)
        return user

    return make
