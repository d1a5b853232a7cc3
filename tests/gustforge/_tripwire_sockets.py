"""Host sockets the red-team tests listen on: any connection that reaches one is a wall that fell."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path


class SocketTripwire:
    """Accepts on a bound, listening socket in a thread and records every connection (`hits`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.hits: list[str] = []
        self._sock = sock
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                continue
            self.hits.append(f"{peer}")
            try:
                self.answer(conn)
            finally:
                conn.close()

    def answer(self, conn: socket.socket) -> None:
        """What a connection gets before it is closed (nothing here)."""

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()


class Listener(SocketTripwire):
    """A TCP listener on 127.0.0.1 that answers like an HTTP server with a token (a leaked token is a leak)."""

    def __init__(self, token: str) -> None:
        self.token = token
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        super().__init__(sock)

    def answer(self, conn: socket.socket) -> None:
        body = json.dumps({"type": "string", "description": self.token}).encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)


class UnixListener(SocketTripwire):
    """A unix socket on the host that anyone may connect to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        path.chmod(0o777)
        super().__init__(sock)
