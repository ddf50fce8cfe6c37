"""Point-to-point: ``isend``/``irecv``, ``send``/``recv``, ``batch_isend_irecv``."""
from . import _mpi
from ._collectives import _group, _inplace, _write
from ._state import _group_rank, _resolve
from ._work import Work


def _p2p(what, tensor, peer, group, tag, group_peer, is_send):
    pg = _group(group, what, [tensor])
    if pg is None:
        return None
    if peer is None and group_peer is None:
        if is_send:
            raise ValueError(f"{what}: dst must be given")
        r = None
    else:
        r = _group_rank(pg, peer, group_peer, what)
    if is_send:
        if r == pg.rank():
            raise ValueError("Invalid destination rank: should not be the same as rank of "
                             "the current process.")
        buf = pg.engine.stage(tensor._data)
        return Work(pg, pg.engine.send(buf, r, tag), None, [tensor], what)
    buf = _inplace(pg, tensor)
    statuses = [_mpi.mpi().Status()] if pg.engine.device_type == "cpu" else None
    return Work(pg, pg.engine.recv(buf, r, tag), lambda: _write(tensor, buf), [tensor], what,
                statuses)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Start sending ``tensor`` to rank ``dst``; returns a Work."""
    return _p2p("isend", tensor, dst, group, tag, group_dst, True)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Start receiving into ``tensor`` from rank ``src`` (any rank when None)."""
    return _p2p("irecv", tensor, src, group, tag, group_src, False)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Send ``tensor`` to rank ``dst`` and wait until it has left."""
    w = isend(tensor, dst, group, tag, group_dst)
    if w is not None:
        w.wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receive into ``tensor`` from ``src`` (any rank when None); returns the sender's
    global rank."""
    w = irecv(tensor, src, group, tag, group_src)
    if w is None:
        return -1
    w.wait()
    if src is None and group_src is None:
        return w.pg.ranks[w.source_rank()]
    return src if src is not None else w.pg.ranks[group_src]


class P2POp:
    """One send or receive for ``batch_isend_irecv``: ``P2POp(dist.isend, tensor, peer)``."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type "
                             "``torch.distributed.isend`` or ``torch.distributed.irecv``.")
        self.op, self.tensor, self.peer, self.group, self.tag, self.group_peer = \
            op, tensor, peer, group, tag, group_peer


def batch_isend_irecv(p2p_op_list):
    """Start every send/receive of ``p2p_op_list``; returns their Works."""
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("Invalid ``p2p_op_list``. Each op is expected to to be of type "
                         "``torch.distributed.P2POp``.")
    return [p.op(p.tensor, p.peer, p.group, p.tag, p.group_peer) for p in p2p_op_list]
