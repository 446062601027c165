"""The console's forms (recovery operations, control, signal, bulk): they build a command, the services decide.

Every form carries, as hidden fields, the revisions of the page the operator looked at and a
fresh idempotency key: a background change in between is refused by the service (ABORTED),
and a double submit replays the first receipt instead of acting twice. A form checks every field it can
by the API's own rules before the service is called, so the operator sees all of its field errors at once.
"""

from collections.abc import Callable

from django import forms

from core import fields as field_rules
from core.errors import InvalidArgument, WeaveError
from core.fields import json_form_value
from core.ids import new_id
from history.idempotency import key_check
from history.models import StepKind
from recovery.commands import ExactResult
from recovery.contracts import result_contract_check
from recovery.pipeline import Operation


def _by_rule(check: Callable[[], object]):
    """A field's value as the API's rule ``check`` reads it: the words the service would refuse it with, as
    this field's error."""
    try:
        return check()
    except InvalidArgument as error:
        raise forms.ValidationError(error.message) from None


class ApiRules:
    """A form's reason, evidence reference (when given) and idempotency key, judged by the API's rules."""

    def clean_reason(self):
        return _by_rule(lambda: field_rules.reason("reason", self.cleaned_data["reason"]))

    def clean_evidence_ref(self):
        value = self.cleaned_data["evidence_ref"]
        return value and _by_rule(lambda: field_rules.token("evidence_ref", value))

    def clean_idempotency_key(self):
        return _by_rule(lambda: key_check(self.cleaned_data["idempotency_key"]))


class CommonFields(ApiRules, forms.Form):
    """Reason, evidence and the declaration every recovery form asks for."""

    reason = forms.CharField(
        max_length=1024,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Why this decision is right: 1 to 1024 characters.",
    )
    evidence_ref = forms.CharField(
        max_length=512,
        strip=False,
        help_text="Where the evidence lives, e.g. ticket:OPS-123 (no spaces; the console never opens it).",
    )
    declaration = forms.BooleanField(required=True)
    expected_revision = forms.CharField(widget=forms.HiddenInput)
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=128)


class StepFields(CommonFields):
    step_key = forms.CharField(widget=forms.HiddenInput)
    activation_id = forms.CharField(widget=forms.HiddenInput)
    expected_step_revision = forms.CharField(widget=forms.HiddenInput)


class TaskFields(CommonFields):
    task_id = forms.CharField(widget=forms.HiddenInput)
    expected_task_revision = forms.CharField(widget=forms.HiddenInput)


class ConclusionFields(forms.Form):
    # The instance's definition, when the form judges a step's result against the step's contract.
    definition = None

    conclusion = forms.ChoiceField(choices=[("SUCCEEDED", "SUCCEEDED"), ("FAILED", "FAILED")])
    result = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}),
        help_text=(
            "JSON, kept exactly as written. SUCCEEDED: a result of the step's fixed contract "
            "(TIMER: null). FAILED: the failure details (any JSON but null)."
        ),
    )

    def clean_result(self):
        text = self.cleaned_data["result"]
        try:
            return json_form_value(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None

    def clean(self):
        """A SUCCEEDED result of a step judged against the step's contract, beside the other fields' errors."""
        data = super().clean()
        if "step_key" in data and "result" in data:
            problem = result_contract_error(self.definition, data["step_key"], data.get("conclusion"), data["result"])
            if problem:
                self.add_error("result", problem)
        return data


def result_contract_error(definition, step_key: str, conclusion: str | None, result) -> str | None:
    """What breaks the step's contract in a SUCCEEDED result (TIMER: none), in the API's words; None when nothing."""
    step = definition.step_spec(step_key) if definition else None
    if step is None or step["kind"] == StepKind.TIMER or conclusion != "SUCCEEDED":
        return None
    try:
        text = field_rules.json_text("result", result)
        result_contract_check(spec=step, result=ExactResult(text=text, value=result))
    except InvalidArgument as error:
        return error.message
    return None


_TARGET_FIELDS = {"task": TaskFields, "step": StepFields, "instance": CommonFields}


def recovery_form_class(operation: Operation) -> type[forms.Form]:
    """The form of one operation, with its declaration spelled out beside the checkbox."""
    bases = (_TARGET_FIELDS[operation.target],)
    if operation.with_conclusion:
        bases = (*bases, ConclusionFields)

    def __init__(self, *args, definition=None, **kwargs):
        super(form_class, self).__init__(*args, **kwargs)
        self.definition = definition
        # self.fields are this form's own copies: the shared class fields stay untouched.
        declaration_label(self.fields["declaration"], operation)
        # The first field the operator fills takes the focus: no tabbing through the admin's navigation.
        first = next(f for f in self.fields.values() if not isinstance(f.widget, forms.HiddenInput))
        first.widget.attrs["autofocus"] = True

    form_class = type(f"{operation.title.replace(' ', '')}Form", bases, {"__init__": __init__})
    return form_class


def declaration_label(field: forms.Field, operation: Operation, scope: str = "") -> None:
    """The declaration checkbox of ``operation``, its field named and its words spelled out."""
    field.label = f"I declare ({operation.declaration}){scope}"
    field.help_text = operation.command_class.declaration.wording


def form_command(operation: Operation, data: dict) -> dict:
    """The flat JSON command the API takes, built from a valid form's cleaned data."""
    command = {
        "expected_revision": data["expected_revision"],
        "reason": data["reason"],
        "evidence_ref": data["evidence_ref"],
        operation.declaration: True,
    }
    for name in ("task_id", "expected_task_revision", "step_key", "activation_id", "expected_step_revision"):
        if name in data:
            command[name] = data[name]
    if operation.with_conclusion:
        command["conclusion"] = data["conclusion"]
        command["result"] = data["result"]
    return command


def fresh_key() -> str:
    return f"admin-{new_id()}"


def hidden_copy(form: forms.Form) -> forms.Form:
    """The same bound form with every field hidden: the confirm step re-posts exactly what was previewed."""
    for field in form.fields.values():
        field.widget = forms.HiddenInput()
    return form


class ControlForm(ApiRules, forms.Form):
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    expected_control_revision = forms.CharField(widget=forms.HiddenInput)


class SignalForm(ApiRules, forms.Form):
    target_step_key = forms.CharField(max_length=64)
    name = forms.CharField(max_length=128)
    payload_version = forms.CharField(max_length=64)
    correlation_key = forms.CharField(max_length=256, required=False)
    payload = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 80}), help_text="JSON, kept exactly.")
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    evidence_ref = forms.CharField(max_length=512, required=False)
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=128)

    def clean_payload(self):
        try:
            return json_form_value(self.cleaned_data["payload"])
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None


class BulkForm(forms.Form):
    reason = forms.CharField(max_length=1024, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    evidence_ref = forms.CharField(max_length=512)
    declaration = forms.BooleanField(required=True)


def attach_error(form: forms.Form, error: WeaveError) -> None:
    """Show a service refusal on the field it names, or above the form."""
    field = error.field
    if field in form.fields and not isinstance(form.fields[field].widget, forms.HiddenInput):
        form.add_error(field, error.message)
    else:
        form.add_error(None, f"{error.code}: {error.message}")


def preview_rows(preview: dict, prefix: str = "") -> list[tuple[str, object, object, bool]]:
    """Flatten a preview into (what, before, after, changed) rows; ``{before, after}`` pairs are changes."""
    rows = []
    for key, value in preview.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and set(value) == {"before", "after"}:
            rows.append((name, value["before"], value["after"], value["before"] != value["after"]))
        elif isinstance(value, dict):
            rows += preview_rows(value, f"{name}.")
        else:
            rows.append((name, value, value, False))
    return rows
