import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from core.identity import Identity
from core.ids import new_id
from core.logs import log_context
from engine.background import Outage, ProcessBeat
from engine.handlers import HANDLERS, claim_execute
from engine.incidents import Item, isolated
from engine.worker import Claim, task_claim_batch
from history.models import Namespace, ProcessKind, Queue, Scope
from history.tenancy import actor_id_for

log = logging.getLogger("weave.worker")

MAX_BATCH = 100
FIRST_IDLE_SECONDS = 0.01


class Command(BaseCommand):
    help = "Lease tasks of one queue and run them with the registered handlers (" + ", ".join(sorted(HANDLERS)) + ")."

    def add_arguments(self, parser):
        parser.add_argument("--namespace", help="needed only when several namespaces have a queue of that name")
        parser.add_argument("--queue", required=True)
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--lease", type=int, default=30, help="lease seconds per attempt (default 30)")
        parser.add_argument(
            "--interval", type=float, default=0.5, help="longest sleep after empty claims (doubling up to it)"
        )
        parser.add_argument("--batch", type=int, default=1, help="tasks claimed per transaction, run one after another")
        parser.add_argument("--once", action="store_true", help="one claim per thread (up to --batch tasks), then exit")
        parser.add_argument("--name", default="", help="worker name recorded on attempts")

    def handle(self, *args, **options):
        queues = Queue.objects.filter(name=options["queue"])
        if options["namespace"]:
            queues = queues.filter(namespace__name=options["namespace"])
        namespace_ids = list(queues.values_list("namespace_id", flat=True)[:2])
        if len(namespace_ids) != 1:
            where = f" in {options['namespace']}" if options["namespace"] else ""
            found = "several namespaces have it: pass --namespace" if namespace_ids else "no such queue"
            raise CommandError(f"--queue: {options['queue']!r}{where}: {found}")
        namespace = Namespace.objects.get(pk=namespace_ids[0])
        if not 1 <= options["concurrency"] <= 64:
            raise CommandError("--concurrency: 1 to 64")
        if not 1 <= options["batch"] <= MAX_BATCH:
            raise CommandError(f"--batch: 1 to {MAX_BATCH}")
        identity = Identity(
            namespace_id=namespace.id,
            actor_id=actor_id_for(namespace.name, "weave_worker"),
            scopes=frozenset({Scope.TASKS_WORK}),
            queues=frozenset({options["queue"]}),
        )
        name = options["name"] or f"weave_worker/{options['queue']}/{threading.get_native_id()}"
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        command = {"worker": name[:128], "lease_seconds": options["lease"]}
        beat = ProcessBeat(ProcessKind.WORKER, queue=options["queue"], namespace_id=namespace.id)

        def run_one() -> bool:
            # One claim and the tasks it brought back are one pass: their log lines share its pass_id.
            with log_context(pass_id=new_id(), namespace=namespace.id):
                claims = task_claim_batch(
                    identity=identity, queue_name=options["queue"], command=command, limit=options["batch"]
                )
                for claim in claims:
                    self._run(identity, claim, options["lease"])
            beat.beat(len(claims))
            return bool(claims)

        if options["once"]:
            beat.start()
            if options["concurrency"] == 1:
                run_one()
            else:
                with ThreadPoolExecutor(options["concurrency"]) as pool:
                    list(pool.map(lambda _: self._in_thread(run_one), range(options["concurrency"])))
            beat.stop()
            return

        Outage(name, stopping).run(beat.start)  # missed in an outage, the row is inserted by the first beat written
        connection.close()  # the threads have their own; the stop opens a new one rather than find this one timed out

        def loop() -> None:
            outage = Outage(name, stopping)
            idle = FIRST_IDLE_SECONDS
            try:
                while not stopping.is_set():
                    if outage.run(run_one) is False:
                        # An empty queue is asked again soon, then less and less often; the connection stays open.
                        stopping.wait(min(idle, options["interval"]))
                        idle *= 2
                    else:
                        idle = FIRST_IDLE_SECONDS
            finally:
                connection.close()

        threads = [threading.Thread(target=loop, daemon=True) for _ in range(options["concurrency"])]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
        except KeyboardInterrupt:
            stopping.set()
        beat.stop()

    def _run(self, identity: Identity, claim: Claim, lease: int) -> None:
        log.info("task %s attempt %s: %s", claim.task.id, claim.attempt.number, claim.task.handler)
        # A handler's exception is already a FAILED completion; anything else on this task (its
        # completion refused, its stored input unreadable) is set aside and the worker goes on.
        item = Item("worker", "task", claim.task.id, claim.task.source_instance_id)
        completion = isolated(item, lambda: claim_execute(identity=identity, claim=claim, lease_seconds=lease))
        if completion is not None and completion.late:
            # The lease was lost: the result is kept as late evidence; this work is no longer wanted.
            log.info("task %s attempt %s: late, kept as evidence", claim.task.id, claim.attempt.number)

    @staticmethod
    def _in_thread(run) -> bool:
        try:
            return run()
        finally:
            connection.close()
