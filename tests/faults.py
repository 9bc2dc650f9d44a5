"""Faults injected outside the code under test: a TCP proxy between a client and a server
(PostgreSQL, here) that forwards bytes, or holds them (``freeze``: the connection stays open and
nothing arrives, as on a partition or a stalled switch) until ``thaw``; ``freeze_on(pattern)``
freezes when the client next sends ``pattern`` (holding, for example, a COMMIT whose statements
the server has already run); ``cut_on_reply(pattern, after)`` closes the connection when the
server next sends ``pattern`` once the client has sent ``after``, before the client sees it (a
reply lost: the outcome unknown to the client)."""

from __future__ import annotations

import select
import socket
import threading


class FreezingProxy:
    """``127.0.0.1:<port>`` forwarding to ``target``; a thread per connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self._closed = threading.Event()
        self._trigger: bytes | None = None
        self._cut: tuple[bytes, bytes] | None = None  # (reply, after what the client sent)
        self._cut_armed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.flowing.clear()

    def freeze_on(self, pattern: bytes) -> None:
        self._trigger = pattern

    def cut_on_reply(self, pattern: bytes, after: bytes) -> None:
        self._cut, self._cut_armed = (pattern, after), False

    def thaw(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed.set()
        self.thaw()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if self._cut is not None:
                        reply, after = self._cut
                        if sock is client and after in data:
                            self._cut_armed = True
                        elif sock is server and self._cut_armed and reply in data:
                            self._cut = None
                            return  # closed below: the reply never reaches the client
                    if sock is client and self._trigger is not None and self._trigger in data:
                        self._trigger = None
                        self.freeze()
                    self.flowing.wait()  # frozen: held here, the connection left open
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            server.close()
