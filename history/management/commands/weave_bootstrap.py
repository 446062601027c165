import json
import secrets

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from history.credentials import credential_issue
from history.groups import GROUPS
from history.models import Operator, Scope
from history.tenancy import actor_id_for, is_name, namespace_ensure

DEFAULT_SCOPES = [Scope.READ, Scope.WRITE, Scope.CONTROL, Scope.TASKS_WORK]
EXPLICIT_ONLY = {Scope.AUDIT_READ: "--workflow-audit-access", Scope.RECOVER: "--recover-access"}


class Command(BaseCommand):
    help = "Create a namespace, its application and queues if missing, and issue one credential."

    def add_arguments(self, parser):
        parser.add_argument("--namespace", required=True)
        parser.add_argument("--actor", required=True, help="actor name; its id is derived from it")
        parser.add_argument("--application", default="default")
        parser.add_argument("--queues", default="*", help="comma-separated queue names, or '*' for all")
        parser.add_argument("--scopes", default=None, help="comma-separated scopes (default: read,write,control,work)")
        parser.add_argument("--workflow-audit-access", action="store_true", help="also grant workflows:audit:read")
        parser.add_argument("--recover-access", action="store_true", help="also grant workflows:recover")
        parser.add_argument("--label", default="")
        parser.add_argument("--admin-user", default=None, help="also create an admin login acting as this actor")
        parser.add_argument(
            "--group",
            action="append",
            choices=sorted(GROUPS),
            help="console group of the admin user (repeatable; default: operators)",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        namespace = options["namespace"]
        if not is_name(namespace):
            raise CommandError(f"--namespace: {namespace!r} must match [a-z0-9][a-z0-9_.-]{{0,63}}")
        if not is_name(options["application"]):
            raise CommandError(f"--application: {options['application']!r} must match [a-z0-9][a-z0-9_.-]{{0,63}}")
        actor = options["actor"].strip()
        if not actor or len(actor) > 128:
            raise CommandError("--actor: 1 to 128 characters")
        queues_arg = options["queues"].strip()
        if queues_arg == "*":
            queue_access, queue_names = "*", []
        else:
            queue_names = [q.strip() for q in queues_arg.split(",")]
            bad = [q for q in queue_names if not is_name(q)]
            if bad or not queue_names:
                raise CommandError(f"--queues: invalid queue name(s) {bad or [queues_arg]!r}")
            queue_access = sorted(set(queue_names))
        scopes = self._scopes(options)

        with transaction.atomic():
            ns, app, _ = namespace_ensure(name=namespace, application=options["application"], queues=queue_names)
            actor_id = actor_id_for(namespace, actor)
            issued = credential_issue(
                namespace_id=ns.id,
                application_id=app.id,
                actor_id=actor_id,
                label=options["label"] or actor,
                scopes=scopes,
                queue_access=queue_access,
            )
            admin_password = self._admin_user(
                options["admin_user"], options["group"] or ["operators"], ns.id, actor_id, queue_access
            )
        summary = {
            "token": issued.token,
            "credential_id": issued.credential.id,
            "actor_id": actor_id,
            "namespace": namespace,
            "scopes": issued.credential.scopes,
            "queues": queue_access,
        }
        if admin_password is not None:
            summary["admin_user"] = options["admin_user"]
            summary["admin_password"] = admin_password
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            self.stdout.write(f"credential {summary['credential_id']} for {actor} in {namespace}")
            self.stdout.write(f"scopes: {', '.join(summary['scopes'])}; queues: {queue_access}")
            self.stdout.write(f"token (shown once): {issued.token}")
            if admin_password is not None:
                self.stdout.write(f"admin login: {options['admin_user']} / {admin_password}")

    def _admin_user(self, username, groups, namespace_id, actor_id, queue_access) -> str | None:
        if username is None:
            return None
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        user, _ = get_user_model().objects.get_or_create(username=username)
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.is_staff = True
        user.save()
        user.groups.set(Group.objects.filter(name__in=groups))
        Operator.objects.update_or_create(
            user=user, defaults={"namespace_id": namespace_id, "actor_id": actor_id, "queue_access": queue_access}
        )
        return password

    def _scopes(self, options) -> list[str]:
        if options["scopes"] is None:
            scopes = [str(s) for s in DEFAULT_SCOPES]
        else:
            scopes = [s.strip() for s in options["scopes"].split(",") if s.strip()]
            unknown = [s for s in scopes if s not in Scope.values]
            if unknown or not scopes:
                raise CommandError(f"--scopes: unknown scope(s) {unknown!r}; known: {', '.join(Scope.values)}")
            for scope, flag in EXPLICIT_ONLY.items():
                if scope in scopes:
                    raise CommandError(f"--scopes: {scope} is granted only by {flag}")
        if options["workflow_audit_access"]:
            scopes.append(Scope.AUDIT_READ.value)
        if options["recover_access"]:
            scopes.append(Scope.RECOVER.value)
        return scopes
