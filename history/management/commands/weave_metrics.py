import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from prometheus_client import start_http_server

from history.metrics import metrics_registry

log = logging.getLogger("weave.metrics")


class Command(BaseCommand):
    help = (
        "Serve the Prometheus metrics (the processes' counters and the database's gauges) on their own address: "
        "an operator's tool, bound to loopback unless told otherwise."
    )

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:9108", help="HOST:PORT (default 127.0.0.1:9108)")

    def handle(self, *args, **options):
        host, _, port = options["bind"].rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CommandError(f"--bind: {options['bind']!r} is not HOST:PORT")
        start_http_server(int(port), addr=host, registry=metrics_registry())
        log.info("metrics on http://%s/metrics", options["bind"])
        # SIGTERM ends the wait: the exporter stops with status 0, as the other processes do.
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        stopping.wait()
