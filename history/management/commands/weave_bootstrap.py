import json
import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core.errors import Unauthenticated
from history.credentials import credential_authenticate, credential_issue
from history.groups import GROUPS, groups_ensure
from history.models import Namespace, Operator, Queue, Scope
from history.tenancy import actor_id_for, is_name, namespace_ensure

DEFAULT_SCOPES = [Scope.READ, Scope.WRITE, Scope.CONTROL, Scope.TASKS_WORK]
EXPLICIT_ONLY = {Scope.AUDIT_READ: "--workflow-audit-access", Scope.RECOVER: "--recover-access"}
# Logins in these groups only, and no other, get no token unless --token-scopes asks for one.
READ_ONLY_GROUPS = {"viewers", "auditors"}
NEW_LOGIN_GROUPS = ["operators"]


class Command(BaseCommand):
    help = (
        "Create a namespace and its application if missing, issue one API credential, and optionally an admin login. "
        "Named queues must exist unless --create-queue."
    )

    def add_arguments(self, parser):
        default_scopes = ",".join(DEFAULT_SCOPES)
        parser.add_argument("--namespace", required=True, help="created if missing")
        parser.add_argument("--actor", required=True, help="actor name; its id is derived from it")
        parser.add_argument("--application", default="default", help="created if missing (default: default)")
        parser.add_argument(
            "--queues",
            default="*",
            help="comma-separated existing queue names the token and login may use, or '*' for all (default: *)",
        )
        parser.add_argument("--create-queue", action="store_true", help="create the --queues that do not exist yet")
        parser.add_argument(
            "--token-scopes",
            default=None,
            help=(
                f"comma-separated scopes the token gets, exactly, of: {', '.join(s for s in Scope.values)}. "
                f"Default: {default_scopes} without --admin-user or for a login in operators; no token for a "
                "login in no group but viewers/auditors. workflows:audit:read and workflows:recover come only from "
                "their own flags, added to these."
            ),
        )
        parser.add_argument("--scopes", default=None, help="the former name of --token-scopes, same meaning")
        parser.add_argument("--workflow-audit-access", action="store_true", help="add workflows:audit:read")
        parser.add_argument("--recover-access", action="store_true", help="add workflows:recover")
        parser.add_argument("--no-token", action="store_true", help="issue no API token (an admin login only)")
        parser.add_argument("--label", default="", help="the credential's label (default: the actor name)")
        parser.add_argument(
            "--admin-user",
            default=None,
            help=(
                "also create an admin login acting as this actor in --namespace; an existing login keeps its "
                "groups, queues and password and gains the --group and --queues named (it must act as the same "
                "actor in the same namespace)"
            ),
        )
        parser.add_argument(
            "--group",
            action="append",
            choices=sorted(GROUPS),
            help="console group of the admin login (repeatable; default for a new login: operators; none added "
            "to an existing one)",
        )
        parser.add_argument(
            "--reset-password", action="store_true", help="give an existing admin login a new password and print it"
        )
        parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
        parser.add_argument(
            "--remember",
            metavar="FILE",
            default=None,
            help=(
                "keep the issued token and admin password in FILE (readable by this user only); while they still "
                "work against this database, a later run prints them again and changes nothing (the demo's login)"
            ),
        )

    def handle(self, *args, **options):
        namespace = options["namespace"]
        if not is_name(namespace):
            raise CommandError(f"--namespace: {namespace!r} must match [a-z0-9][a-z0-9_.-]{{0,63}}")
        if not is_name(options["application"]):
            raise CommandError(f"--application: {options['application']!r} must match [a-z0-9][a-z0-9_.-]{{0,63}}")
        actor = options["actor"].strip()
        if not actor or len(actor) > 128:
            raise CommandError("--actor: 1 to 128 characters")
        queue_access, queue_names = self._queues(options)
        requested = self._requested_scopes(options)
        username = options["admin_user"]
        if username is None:
            for flag in ("group", "reset_password"):
                if options[flag]:
                    raise CommandError(f"--{flag.replace('_', '-')}: only with --admin-user")

        remembered = _kept(options["remember"], username, namespace, actor_id_for(namespace, actor))
        if remembered is not None:
            self._print(remembered, options, username, again=True)
            return
        with transaction.atomic():
            self._queues_exist(namespace, queue_names, options["create_queue"])
            ns, app, _ = namespace_ensure(name=namespace, application=options["application"], queues=queue_names)
            actor_id = actor_id_for(namespace, actor)
            login = None
            if username is not None:
                login = self._admin_user(username, options, ns.id, actor_id, queue_access)
            scopes = self._scopes(options, requested, login["groups"] if login else None)
            issued = None
            if scopes is not None:
                issued = credential_issue(
                    namespace_id=ns.id,
                    application_id=app.id,
                    actor_id=actor_id,
                    label=options["label"] or actor,
                    scopes=scopes,
                    queue_access=queue_access,
                )
        summary = {
            "token": issued.token if issued else None,
            "credential_id": issued.credential.id if issued else None,
            "actor_id": actor_id,
            "namespace": namespace,
            "scopes": issued.credential.scopes if issued else [],
            "queues": queue_access,
        }
        if login is not None:
            summary |= {
                "admin_user": username,
                "admin_password": login["password"],
                "admin_groups": login["groups"],
                "admin_queues": login["queues"],
            }
        if options["remember"]:
            _keep(options["remember"], summary)
        self._print(summary, options, username, again=False)

    def _print(self, summary: dict, options, username: str | None, *, again: bool) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        actor, namespace = options["actor"].strip(), summary["namespace"]
        if summary["token"] is None:
            self.stdout.write(f"no API token for {actor} in {namespace} (ask with --token-scopes)")
        else:
            self.stdout.write(f"credential {summary['credential_id']} for {actor} in {namespace}")
            self.stdout.write(f"scopes: {', '.join(summary['scopes'])}; queues: {summary['queues']}")
            shown = f"kept in {options['remember']}" if options["remember"] else "shown once"
            self.stdout.write(f"token ({shown}): {summary['token']}")
        if username is not None:
            password = summary["admin_password"] or "(unchanged; --reset-password for a new one)"
            self.stdout.write(
                f"admin login: {username} / {password}{' (unchanged since the last run)' if again else ''}"
            )
            self.stdout.write(
                f"admin groups: {', '.join(summary['admin_groups']) or '-'}; queues: {summary['admin_queues']}"
            )

    def _queues(self, options) -> tuple[str | list[str], list[str]]:
        queues_arg = options["queues"].strip()
        if queues_arg == "*":
            if options["create_queue"]:
                raise CommandError("--create-queue: name the queues to create in --queues")
            return "*", []
        queue_names = [q.strip() for q in queues_arg.split(",")]
        bad = [q for q in queue_names if not is_name(q)]
        if bad or not queue_names:
            raise CommandError(f"--queues: invalid queue name(s) {bad or [queues_arg]!r}")
        return sorted(set(queue_names)), queue_names

    def _queues_exist(self, namespace: str, queue_names: list[str], create: bool) -> None:
        if create or not queue_names:
            return
        found = Queue.objects.filter(namespace__name=namespace, name__in=queue_names)
        existing = set(found.values_list("name", flat=True))
        missing = sorted(set(queue_names) - existing)
        if missing:
            raise CommandError(
                f"--queues: no queue {', '.join(missing)} in namespace {namespace!r}; "
                "check the names, or pass --create-queue to create them"
            )

    def _requested_scopes(self, options) -> list[str] | None:
        """The scopes --token-scopes names, validated; None when it is not given."""
        given = [name for name in ("token_scopes", "scopes") if options[name] is not None]
        if not given:
            return None
        flag = "--" + given[0].replace("_", "-")
        if len(given) > 1:
            raise CommandError("--scopes: not with --token-scopes (it is its former name)")
        if options["no_token"]:
            raise CommandError(f"{flag}: not with --no-token")
        scopes = [s.strip() for s in options[given[0]].split(",") if s.strip()]
        unknown = [s for s in scopes if s not in Scope.values]
        if unknown or not scopes:
            raise CommandError(f"{flag}: unknown scope(s) {unknown!r}; known: {', '.join(Scope.values)}")
        for scope, granted_by in EXPLICIT_ONLY.items():
            if scope in scopes:
                raise CommandError(f"{flag}: {scope} is granted only by {granted_by}")
        return scopes

    def _scopes(self, options, requested: list[str] | None, groups: list[str] | None) -> list[str] | None:
        """The token's scopes, or None for no token."""
        flagged = [scope.value for scope in EXPLICIT_ONLY if options[_flag_option(scope)]]
        if options["no_token"]:
            if flagged:
                raise CommandError(f"{EXPLICIT_ONLY[Scope(flagged[0])]}: not with --no-token")
            return None
        if requested is not None:
            return requested + flagged
        if groups is not None and set(groups) <= READ_ONLY_GROUPS:
            if flagged:
                raise CommandError(
                    f"{EXPLICIT_ONLY[Scope(flagged[0])]}: a login in {' and '.join(groups) or 'no group'} "
                    "gets no token unless --token-scopes names its scopes"
                )
            return None
        return [str(s) for s in DEFAULT_SCOPES] + flagged

    def _admin_user(self, username: str, options, namespace_id: str, actor_id: str, queue_access) -> dict:
        """Create the login, or add groups and queues to an existing one; refuse to re-point it elsewhere."""
        if not username.strip() or len(username) > 150:
            raise CommandError("--admin-user: 1 to 150 characters")
        user = get_user_model().objects.filter(username=username).first()
        password = None
        if user is None:
            user = get_user_model()(username=username, is_staff=True)
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            user.save()
            named = options["group"] or NEW_LOGIN_GROUPS
            Operator.objects.create(user=user, namespace_id=namespace_id, actor_id=actor_id, queue_access=queue_access)
            queues = queue_access
        else:
            operator = Operator.objects.filter(user=user).first()
            if operator is not None and (operator.namespace_id, operator.actor_id) != (namespace_id, actor_id):
                where = Namespace.objects.filter(id=operator.namespace_id).values_list("name", flat=True).first()
                raise CommandError(
                    f"--admin-user: {username!r} already acts as another actor or in namespace {where!r}; "
                    "a login acts as one actor in one namespace: choose another --admin-user"
                )
            named = options["group"] or []
            queues = _queues_union(operator.queue_access if operator else [], queue_access)
            Operator.objects.update_or_create(
                user=user, defaults={"namespace_id": namespace_id, "actor_id": actor_id, "queue_access": queues}
            )
            if options["reset_password"]:
                password = secrets.token_urlsafe(12)
                user.set_password(password)
            user.is_staff = True
            user.save()
        if Group.objects.filter(name__in=named).count() < len(set(named)):
            groups_ensure()
        user.groups.add(*Group.objects.filter(name__in=named))
        groups = sorted(user.groups.values_list("name", flat=True))
        return {"password": password, "groups": groups, "queues": queues}


def _kept(path: str | None, username: str | None, namespace: str, actor_id: str) -> dict | None:
    """The summary kept in ``path`` if it is this actor's and its token and password still work here, else None."""
    if path is None:
        return None
    try:
        summary = json.loads(Path(path).read_text())
        if (summary["namespace"], summary["actor_id"]) != (namespace, actor_id):
            return None
        if summary["token"] is not None:
            credential_authenticate(token=summary["token"])
        if username is not None:
            user = get_user_model().objects.filter(username=username, is_active=True, is_staff=True).first()
            if (
                summary.get("admin_user") != username
                or user is None
                or not user.check_password(summary["admin_password"])
            ):
                return None
    except (OSError, ValueError, KeyError, TypeError, Unauthenticated):
        return None
    return summary


def _keep(path: str, summary: dict) -> None:
    """Write the summary for this user only (it holds a token and a password)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(json.dumps(summary))


def _flag_option(scope: Scope) -> str:
    return EXPLICIT_ONLY[scope].removeprefix("--").replace("-", "_")


def _queues_union(held, added) -> str | list[str]:
    if held == "*" or added == "*":
        return "*"
    return sorted(set(held) | set(added))
