"""A small TCP proxy for partition tests: relays bytes between clients and a
server; ``partition()`` stops relaying in both directions (bytes are held,
connections stay open, as when the network drops packets), ``heal()``
resumes. The kernel here has no netem, so this is how a member is cut off
from PostgreSQL while the server and the other members carry on.
``hold(i)`` / ``release(i)`` do the same to the ``i``-th connection
accepted (0-based) alone, to cut off one of a client's connections.
``close()`` ends every relayed connection at once (both peers see it
closed) and accepts no more."""

from __future__ import annotations

import socket
import threading


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._open = threading.Event()
        self._open.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        #: one gate per accepted connection, in accept order
        self.gates: list[threading.Event] = []
        self._held: dict[int, int] = {}  # gate index -> pumps holding bytes at it
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def partition(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def hold(self, index: int) -> None:
        self.gates[index].clear()

    def release(self, index: int) -> None:
        self.gates[index].set()

    def holding(self, index: int) -> bool:
        """Whether bytes of connection ``index`` wait at its closed gate."""
        return self._held.get(index, 0) > 0

    def close(self) -> None:
        self._closed = True
        self._open.set()
        for gate in self.gates:
            gate.set()
        self._listener.close()
        for s in self._sockets:
            # shut down first: a plain close() neither wakes the pump blocked
            # in recv() on it nor tells the peer (a member would wait out its
            # database timeouts, and its retries, on a dead connection)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._open.wait()
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            gate = threading.Event()
            gate.set()
            self.gates.append(gate)
            index = len(self.gates) - 1
            for a, b in ((client, server), (server, client)):
                args = (a, b, gate, index)
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, gate: threading.Event, index: int
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._open.wait()  # partitioned: hold the bytes
                if not gate.is_set():
                    self._held[index] = self._held.get(index, 0) + 1
                    gate.wait()
                    self._held[index] -= 1
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
