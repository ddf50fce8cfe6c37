"""Key-value stores for rendezvous, as ``torch.distributed``'s Store API: ``TCPStore`` (a
server thread in the master process, clients over TCP), ``FileStore`` (a file on a shared
file system), ``HashStore`` (in-process) and ``PrefixStore`` (a namespace in another store).

Only small values go through a store: ranks, MPI port names, NCCL unique ids. Collectives
never do; they go through MPI or NCCL.
"""
import datetime
import fcntl
import os
import pickle
import socket
import socketserver
import struct
import threading
import time

_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)


class DistError(RuntimeError):
    """Base of the errors torch.distributed raises (``torch.distributed.DistError``)."""


class DistStoreError(DistError):
    """A store operation failed or timed out."""


class QueueEmptyError(DistStoreError):
    """``Store.queue_pop(key, block=False)`` found the queue empty.

    Example:
        >>> import ember.distributed as dist
        >>> try:
        ...     dist.HashStore().queue_pop("q", block=False)
        ... except dist.QueueEmptyError as e:
        ...     print(e)
        queue is empty
    """


class DistNetworkError(DistError):
    """A connection to a store or a peer failed."""


class DistBackendError(DistError):
    """A collective failed in the communication engine."""


def _seconds(timeout):
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


def _bytes(v):
    return v.encode() if isinstance(v, str) else bytes(v)


class _Table:
    """The key-value table with blocking reads: HashStore's state, and the TCPStore server's."""

    def __init__(self):
        self.data, self.cond = {}, threading.Condition()

    def call(self, op, *args):
        with self.cond:
            out = getattr(self, "_" + op)(*args)
            self.cond.notify_all()
            return out

    def _set(self, key, value):
        self.data[key] = value

    def _get(self, key):
        return self.data.get(key)

    def _add(self, key, amount):
        v = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(v).encode()
        return v

    def _append(self, key, value):
        self.data[key] = self.data.get(key, b"") + value

    def _compare_set(self, key, expected, desired):
        cur = self.data.get(key)
        if (cur is None and expected == b"") or cur == expected:
            self.data[key] = desired
            return desired
        return expected if cur is None else cur

    def _delete_key(self, key):
        return self.data.pop(key, None) is not None

    def _num_keys(self):
        return len(self.data)

    def _check(self, keys):
        return all(k in self.data for k in keys)

    # a queue is a list under its key, which exists while the queue is not empty (so
    # check/wait see a non-empty queue, as torch's)
    def _queue_push(self, key, value):
        self.data[key] = self.data.get(key, []) + [value]

    def _queue_pop(self, key):
        q = self.data.get(key)
        if not isinstance(q, list):
            return None
        if len(q) > 1:
            self.data[key] = q[1:]
        else:
            del self.data[key]
        return q[0]

    def _queue_len(self, key):
        q = self.data.get(key)
        return len(q) if isinstance(q, list) else 0

    def wait(self, keys, timeout):
        with self.cond:
            return self.cond.wait_for(lambda: all(k in self.data for k in keys), timeout)


class Store:
    """A key-value store shared by the processes of a job, as ``torch.distributed.Store``.
    Subclasses give ``_call(op, *args)`` (and ``_wait``); keys are str, values bytes.

    Example:
        >>> import ember.distributed as dist
        >>> s = dist.HashStore()
        >>> s.set("k", "v"); s.get("k"), s.add("n", 2), s.add("n", 3)
        (b'v', 2, 5)
    """

    def __init__(self, timeout=_DEFAULT_TIMEOUT):
        self._timeout = datetime.timedelta(seconds=_seconds(timeout))

    @property
    def timeout(self):
        return self._timeout

    def set_timeout(self, timeout):
        self._timeout = datetime.timedelta(seconds=_seconds(timeout))

    def set(self, key, value):
        self._call("set", key, _bytes(value))

    def get(self, key):
        """The value of ``key``, waiting up to the store's timeout for it to be set."""
        self.wait([key])
        return self._call("get", key)

    def add(self, key, amount):
        return self._call("add", key, int(amount))

    def append(self, key, value):
        self._call("append", key, _bytes(value))

    def compare_set(self, key, expected_value, desired_value):
        return self._call("compare_set", key, _bytes(expected_value), _bytes(desired_value))

    def delete_key(self, key):
        return self._call("delete_key", key)

    def num_keys(self):
        return self._call("num_keys")

    def check(self, keys):
        return self._call("check", list(keys))

    def multi_get(self, keys):
        return [self.get(k) for k in keys]

    def multi_set(self, keys, values):
        for k, v in zip(keys, values):
            self.set(k, v)

    def queue_push(self, key, value):
        """Append ``value`` to the queue ``key``.

        Example:
            >>> import ember.distributed as dist
            >>> s = dist.HashStore(); s.queue_push("q", "a"); s.queue_push("q", b"b")
            >>> s.queue_len("q"), s.queue_pop("q"), s.queue_pop("q", block=False)
            (2, b'a', b'b')
        """
        self._call("queue_push", key, _bytes(value))

    def queue_pop(self, key, block=True):
        """The oldest value of the queue ``key``, waiting up to the store's timeout for one
        (``block=False``: raise ``QueueEmptyError`` at once)."""
        deadline = time.monotonic() + _seconds(self._timeout)
        while True:
            v = self._call("queue_pop", key)
            if v is not None:
                return v
            if not block:
                raise QueueEmptyError("queue is empty")
            if not self._wait([key], max(0.0, deadline - time.monotonic())):
                raise DistStoreError("Wait timeout")

    def queue_len(self, key):
        """How many values the queue ``key`` holds (0 when it does not exist)."""
        return self._call("queue_len", key)

    def wait(self, keys, timeout=None):
        t = _seconds(self._timeout if timeout is None else timeout)
        if not self._wait(list(keys), t):
            raise DistStoreError(f"wait timeout after {int(t * 1000)}ms, keys: "
                                 + ", ".join("/" + k for k in keys))


class HashStore(Store):
    """A store inside one process (threads share it), as ``torch.distributed.HashStore``.

    Example:
        >>> import ember.distributed as dist
        >>> s = dist.HashStore(); s.set("a", b"1"); s.num_keys()
        1
    """

    def __init__(self):
        super().__init__()
        self._table = _Table()

    def _call(self, op, *args):
        return self._table.call(op, *args)

    def _wait(self, keys, timeout):
        return self._table.wait(keys, timeout)


def _send(sock, obj):
    b = pickle.dumps(obj)
    sock.sendall(struct.pack("!Q", len(b)) + b)


def _recv(sock):
    def exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the peer")
            buf += chunk
        return bytes(buf)
    return pickle.loads(exact(struct.unpack("!Q", exact(8))[0]))


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        table, on_close = self.server.table, []
        with table.cond:
            self.server.clients += 1
        try:
            while True:
                op, args = _recv(self.request)
                if op == "on_close":
                    on_close[:] = args[0]
                    _send(self.request, None)
                    continue
                _send(self.request, table.wait(*args) if op == "wait" else table.call(op, *args))
        except (ConnectionError, OSError, EOFError):
            # the client's process is gone (a kill closes its sockets too): leave its word
            for key, value in on_close:
                table.call("compare_set", key, b"", value)
        finally:
            with table.cond:
                self.server.clients -= 1


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = allow_reuse_address = True


class TCPStore(Store):
    """A store served over TCP by the process with ``is_master=True`` (a server thread),
    as ``torch.distributed.TCPStore``. ``port=0`` picks a free port (see ``.port``).

    Example:
        >>> import ember.distributed as dist
        >>> server = dist.TCPStore("127.0.0.1", 0, is_master=True)
        >>> client = dist.TCPStore("127.0.0.1", server.port)
        >>> client.set("x", "1"); server.get("x"), client.compare_set("x", "1", "2")
        (b'1', b'2')
    """

    def __init__(self, host_name, port, world_size=None, is_master=False,
                 timeout=_DEFAULT_TIMEOUT, wait_for_workers=True, multi_tenant=False,
                 master_listen_fd=None, use_libuv=True):
        super().__init__(timeout)
        self.host, self.world_size, self._server = host_name, world_size, None
        if is_master:
            self._server = _Server(("", port), _Handler)
            self._server.table, self._server.clients = _Table(), 0
            port = self._server.server_address[1]
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.port, self._lock = port, threading.Lock()
        self._sock = self._connect(host_name, port, _seconds(timeout))

    @staticmethod
    def _connect(host, port, timeout):
        deadline, err = time.monotonic() + timeout, None
        while time.monotonic() < deadline:       # the master may not be listening yet
            try:
                s = socket.create_connection((host, port), timeout=max(timeout, 1))
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            except OSError as e:
                err = e
                time.sleep(0.05)
        raise DistNetworkError(f"The client socket has timed out after {timeout}s while "
                               f"trying to connect to ({host}, {port}): {err}")

    def _call(self, op, *args):
        with self._lock:
            _send(self._sock, (op, args))
            return _recv(self._sock)

    def _wait(self, keys, timeout):
        return self._call("wait", keys, timeout)

    def _on_close(self, pairs):
        """Ask the server to set each ``(key, value)`` of ``pairs`` that is unset when this
        client's connection drops without a new ``_on_close([])`` first: how a rank killed
        by a signal still tells the others (see distributed_c10d's watchdog)."""
        self._call("on_close", [(k, _bytes(v)) for k, v in pairs])

    def _clients(self):
        """How many connections the server (in this process) has open."""
        return self._server.clients

    def close(self):
        """Stop serving (the master) and drop the connection."""
        self._sock.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class FileStore(Store):
    """A store in one file that every process can open (a shared file system), as
    ``torch.distributed.FileStore``; each operation holds an exclusive ``flock``.

    Example:
        >>> import ember.distributed as dist, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "store")
        >>> a, b = dist.FileStore(path, 2), dist.FileStore(path, 2)
        >>> a.set("k", "v"); b.get("k")
        b'v'
    """

    def __init__(self, file_name, world_size=-1):
        super().__init__()
        self.path, self.world_size = file_name, world_size
        open(file_name, "ab").close()

    def _call(self, op, *args):
        with open(self.path, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            raw = f.read()
            table = _Table()
            table.data = pickle.loads(raw) if raw else {}
            out = table.call(op, *args)
            if op in ("set", "add", "append", "compare_set", "delete_key", "queue_push",
                      "queue_pop"):
                f.seek(0)
                f.truncate()
                f.write(pickle.dumps(table.data))
            return out

    def _wait(self, keys, timeout):
        deadline = time.monotonic() + timeout
        while not self._call("check", keys):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True


class PrefixStore(Store):
    """Keys of ``store`` under ``prefix + '/'``, as ``torch.distributed.PrefixStore``.

    Example:
        >>> import ember.distributed as dist
        >>> base = dist.HashStore(); dist.PrefixStore("job", base).set("k", "v")
        >>> base.get("job/k")
        b'v'
    """

    def __init__(self, prefix, store):
        super().__init__(store.timeout)
        self.prefix, self.underlying_store = prefix, store

    def _call(self, op, *args):
        if op == "num_keys":
            return self.underlying_store._call(op)
        key = [self.prefix + "/" + k for k in args[0]] if op == "check" else \
            self.prefix + "/" + args[0]
        return self.underlying_store._call(op, key, *args[1:])

    def _wait(self, keys, timeout):
        return self.underlying_store._wait([self.prefix + "/" + k for k in keys], timeout)
