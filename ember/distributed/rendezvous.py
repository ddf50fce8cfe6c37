"""``rendezvous(url, rank, world_size)``: how the ranks of a job find a store to meet in, as
``torch.distributed.rendezvous``. A handler per URL scheme yields ``(store, rank,
world_size)``; ``env://``, ``tcp://`` and ``file://`` are built in, and
``register_rendezvous_handler`` adds schemes, which ``init_process_group(init_method=...)``
then accepts."""
import numbers
import os
from urllib.parse import urlparse, urlunparse

from .store import FileStore, TCPStore

_rendezvous_handlers = {}


def register_rendezvous_handler(scheme, handler):
    """Serve ``scheme://`` URLs with ``handler(url, **kwargs)``, a generator yielding ``(store,
    rank, world_size)``; the URL's query carries ``rank`` and ``world_size``.

    Example:
        >>> import ember.distributed as dist
        >>> def mine(url, **kw):
        ...     yield dist.HashStore(), 0, 1
        >>> dist.register_rendezvous_handler("mine-doc", mine)
        >>> store, rank, world = next(dist.rendezvous("mine-doc://", 0, 1)); rank, world
        (0, 1)
    """
    if scheme in _rendezvous_handlers:
        raise RuntimeError(f"Rendezvous handler for {scheme}:// already registered")
    _rendezvous_handlers[scheme] = handler


def _query(query):
    return dict(p.split("=") for p in filter(None, query.split("&")))


def _helper(url, rank, world_size_opt, **kwargs):
    result = urlparse(url)
    if world_size_opt is None:
        world_size = -1
        if result.scheme == "env":
            rank = int(os.environ.get("RANK", rank))
            world_size = int(os.environ.get("WORLD_SIZE", world_size))
    else:
        world_size = world_size_opt
    if rank != -1 or world_size != -1 or world_size_opt is None:
        q = _query(result.query)
        if "rank" in q or "world_size" in q:
            raise AssertionError(f"The url: {url} has node-specific arguments(rank, "
                                 "world_size) already.")
        if rank != -1:
            q["rank"] = str(rank)
        if world_size != -1 or world_size_opt is None:
            q["world_size"] = str(world_size)
        result = result._replace(query="&".join(f"{k}={v}" for k, v in q.items()))
        url = urlunparse(result)
    if result.scheme not in _rendezvous_handlers:
        raise RuntimeError(f"No rendezvous handler for {result.scheme}://")
    return _rendezvous_handlers[result.scheme](url, **kwargs)


def rendezvous(url, rank=-1, world_size=-1, **kwargs):
    """An iterator of ``(store, rank, world_size)`` from the handler of ``url``'s scheme
    (``kwargs``, e.g. ``timeout``, go to the handler).

    Example:
        >>> import ember.distributed as dist, tempfile, os
        >>> url = "file://" + os.path.join(tempfile.mkdtemp(), "rdzv")
        >>> store, rank, world = next(dist.rendezvous(url, rank=0, world_size=1))
        >>> type(store).__name__, rank, world
        ('FileStore', 0, 1)
    """
    if not isinstance(url, (str, bytes)):
        raise RuntimeError(f"`url` must be a string. {type(url)}: {url}")
    if not isinstance(rank, numbers.Integral):
        raise RuntimeError(f"`rank` must be an integer. {rank}")
    if not isinstance(world_size, numbers.Integral):
        raise RuntimeError(f"`world_size` must be an integer. {world_size}")
    return _helper(url, rank, world_size, **kwargs)


def _error(scheme, msg):
    return ValueError(f"Error initializing torch.distributed using {scheme}:// rendezvous: "
                      + msg)


def _rank_world(scheme, q, env=False):
    out = []
    for key, var, what in (("rank", "RANK", "rank parameter"),
                           ("world_size", "WORLD_SIZE", "world size parameter")):
        if key in q:
            out.append(int(q[key]))
        elif env and os.environ.get(var):
            out.append(int(os.environ[var]))
        else:
            raise _error(scheme, f"environment variable {var} expected, but not set" if env
                         else f"{what} missing")
    return out


def _tcp_store(host, port, rank, world_size, timeout):
    if not 0 <= port < 2 ** 16:
        raise ValueError(f"port must have value from 0 to 65535 but was {port}.")
    kw = {} if timeout is None else {"timeout": timeout}
    return TCPStore(host.strip("[]"), port, world_size, rank == 0, **kw)


def _file_handler(url, **kwargs):
    result = urlparse(url)
    if not result.path:
        raise _error("file", "path missing")
    rank, world_size = _rank_world("file", _query(result.query))
    yield FileStore(result.path, world_size), rank, world_size
    raise RuntimeError("Unable to perform rerendezvous using file:// method")


def _tcp_handler(url, timeout=None, **kwargs):
    result = urlparse(url)
    if result.port is None:
        raise _error("tcp", "port number missing")
    rank, world_size = _rank_world("tcp", _query(result.query))
    yield _tcp_store(result.hostname, result.port, rank, world_size, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using tcp:// method")


def _env_handler(url, timeout=None, **kwargs):
    rank, world_size = _rank_world("env", _query(urlparse(url).query), env=True)
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(var):
            raise _error("env", f"environment variable {var} expected, but not set")
    yield _tcp_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank,
                     world_size, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


register_rendezvous_handler("tcp", _tcp_handler)
register_rendezvous_handler("env", _env_handler)
register_rendezvous_handler("file", _file_handler)
