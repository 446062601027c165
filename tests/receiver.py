"""A webhook receiver on 127.0.0.1 for the notifier's tests: it records each request and answers the statuses
it is given, in order (the last one again once they run out)."""

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: str


class Receiver:
    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses or (200,))
        self.received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the name http.server calls)
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"thanks" if status < 300 else b"busy, try later")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def __enter__(self) -> "Receiver":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
