"""A PMI-1 process-manager server, so that ranks started by ``spawn`` or ``emberrun`` join MPI
as one job, as if ``mpiexec`` had started them (MPICH then talks shared memory between ranks
on one host).

MPICH's PMI client (``PMI_PORT=host:port``, ``PMI_RANK``, ``PMI_SIZE`` in the environment
before ``MPI_Init``) connects to a process manager over TCP and exchanges a few text lines
(``cmd=put key=... value=...``, ``cmd=barrier_in``, ``cmd=get ...``) to publish each rank's
address and shared-memory segment: bootstrap only; no collective byte passes here. Rank 0 forks
it (``start``); it serves until every rank has connected and closed its connection, so it
answers every rank's ``MPI_Finalize`` whatever order they exit in, and outlives none.
"""
import os
import selectors
import signal
import socket
import time


def _reply(sock, cmd, **kv):
    sock.sendall((" ".join([f"cmd={cmd}"] + [f"{k}={v}" for k, v in kv.items()]) + "\n")
                 .encode())


def serve(lsock, size, timeout, mapping):
    """Answer ``size`` MPICH PMI-1 clients on the listening socket ``lsock`` until all have
    connected and gone (or none came for ``timeout`` seconds)."""
    sel, kvs, bufs, barrier = selectors.DefaultSelector(), {"PMI_process_mapping": mapping}, {}, []
    sel.register(lsock, selectors.EVENT_READ)
    seen, deadline = 0, time.monotonic() + timeout
    while seen < size or bufs:
        if seen < size and time.monotonic() > deadline:
            return
        for key, _ in sel.select(1.0):
            s = key.fileobj
            if s is lsock:
                conn, _ = lsock.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(conn, selectors.EVENT_READ)
                bufs[conn], seen = b"", seen + 1
                continue
            data = s.recv(65536)
            if not data:
                sel.unregister(s)
                bufs.pop(s)
                s.close()
                barrier = [b for b in barrier if b is not s]
                continue
            bufs[s] += data
            while b"\n" in bufs[s]:
                line, bufs[s] = bufs[s].split(b"\n", 1)
                barrier += _handle(s, line.decode(), kvs, size)
                if len(barrier) == size:
                    for b in barrier:
                        _reply(b, "barrier_out", rc=0)
                    barrier = []


def _handle(s, line, kvs, size):
    """Answer one command; returns [s] when it is a barrier entry (answered when all are in)."""
    args = dict(t.partition("=")[::2] for t in line.split(" ") if "=" in t)
    cmd = args.get("cmd")
    if cmd == "initack":            # PMI_ID given: the rank is the id
        s.sendall(f"cmd=initack rc=0\ncmd=set size={size}\ncmd=set rank={args['pmiid']}\n"
                  f"cmd=set debug={os.environ.get('PMI_DEBUG', 0)}\n".encode())
    elif cmd == "init":
        _reply(s, "response_to_init", pmi_version=1, pmi_subversion=1, rc=0)
    elif cmd == "get_maxes":
        _reply(s, "maxes", kvsname_max=256, keylen_max=256, vallen_max=1024, rc=0)
    elif cmd == "get_appnum":
        _reply(s, "appnum", appnum=0, rc=0)
    elif cmd == "get_my_kvsname":
        _reply(s, "my_kvsname", kvsname="ember", rc=0)
    elif cmd == "get_universe_size":
        _reply(s, "universe_size", size=size, rc=0)
    elif cmd == "put":
        kvs[args["key"]] = args.get("value", "")
        _reply(s, "put_result", rc=0)
    elif cmd == "get":
        if args.get("key") in kvs:
            _reply(s, "get_result", rc=0, found="TRUE", value=kvs[args["key"]])
        else:
            _reply(s, "get_result", rc=1, msg="key_not_found")
    elif cmd == "barrier_in":
        return [s]
    elif cmd == "finalize":
        _reply(s, "finalize_ack", rc=0)
    else:                       # abort, spawn, publish_name...: not served
        _reply(s, f"{cmd}_result", rc=1, msg="unsupported_by_ember")
    return []


def process_mapping(hosts):
    """PMI's ``(vector,(node,nodes,ranks_per_node),...)`` for the host of each rank: one
    triple per run of consecutive ranks on one host."""
    ids, runs = {}, []
    for h in hosts:
        node = ids.setdefault(h, len(ids))
        if runs and runs[-1][0] == node:
            runs[-1][1] += 1
        else:
            runs.append([node, 1])
    return "(vector," + ",".join(f"({n},1,{k})" for n, k in runs) + ")"


def start(size, timeout, mapping):
    """Serve ``size`` ranks from a process of its own; returns the port it listens on.

    NOTE: a process, not a thread: it must answer every rank's MPI_Finalize, which rank 0's
    own runs at interpreter exit, when its threads no longer run. Forked (twice, so that no
    zombie waits on the caller) rather than a new interpreter, which takes longer to start
    than MPI_Init; MPI is not initialised yet in the caller.
    """
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("", 0))
    lsock.listen(size)
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C stops the ranks
                # a session of its own: emberrun kills its workers' process groups once
                # they exit, while another node's ranks may still be in MPI_Finalize
                os.setsid()
                fd = lsock.fileno()             # the caller's sockets (its store) are not ours
                os.closerange(3, fd)
                os.closerange(fd + 1, 1 << 16)
                serve(lsock, size, timeout, mapping)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    port = lsock.getsockname()[1]
    lsock.close()
    return port
