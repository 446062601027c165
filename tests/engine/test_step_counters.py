"""The step counters equal the history after every engine transition."""

import pytest
from django.db.models import Count, Sum

from history.models import Activation, Step, StepKind, Task
from tests.engine.test_faults import TRANSITIONS

pytestmark = pytest.mark.django_db


def step_counter_drift() -> list[tuple]:
    """Steps whose counters differ from their rows, counted here without the checker's SQL."""
    activations = dict(Activation.objects.values("step_id").annotate(n=Count("id")).values_list("step_id", "n"))
    drift = []
    for step in Step.objects.all():
        earlier = Task.objects.filter(source_activation__step_id=step.id).exclude(
            source_activation_id=step.current_activation_id
        )
        attempts = earlier.aggregate(n=Sum("attempt_count"))["n"] or 0 if step.kind == StepKind.TASK else 0
        if (step.activation_count, step.attempts_before) != (activations.get(step.id, 0), attempts):
            drift.append((step.key, step.activation_count, step.attempts_before, activations.get(step.id), attempts))
    return drift


@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_each_engine_transition_keeps_the_step_counters(engine, transition):
    built = transition.build(engine)
    # A builder may write rows directly (drift of its own): the transition adds none.
    before = step_counter_drift()
    transition.run(engine, built)
    assert step_counter_drift() == before
