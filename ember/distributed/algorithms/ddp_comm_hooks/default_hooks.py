"""The built-in DDP comm hooks: plain all-reduce, and all-reduce of a float16 or bfloat16
copy of the bucket (half the bytes on NCCL).

NOTE: on the MPI engine, float16/bfloat16 reductions run in float32 (MPI has no 16-bit
float), so the compression hooks give torch's numerics (values rounded to 16 bits before and
after the reduction) without shrinking the bytes MPI moves.
"""
from ... import distributed_c10d as c10d


def _group(process_group):
    return process_group if process_group is not None else c10d.group.WORLD


def _allreduce_fut(process_group, tensor):
    """All-reduce ``tensor`` / world size asynchronously; a Future of the result."""
    pg = _group(process_group)
    tensor.div_(pg.size())
    return c10d.all_reduce(tensor, group=pg, async_op=True).get_future().then(
        lambda fut: fut.value()[0])


def allreduce_hook(process_group, bucket):
    """DDP's default: the bucket's mean over ranks.

    Example:
        >>> from ember.distributed.algorithms.ddp_comm_hooks import default_hooks
        >>> callable(default_hooks.allreduce_hook)
        True
    """
    return _allreduce_fut(process_group, bucket.buffer())


def _compress_hook(dtype, process_group, bucket):
    pg = _group(process_group)
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(pg.size())

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer
    return c10d.all_reduce(compressed, group=pg, async_op=True).get_future().then(decompress)


def fp16_compress_hook(process_group, bucket):
    """All-reduce the bucket cast to float16, then cast back (``ddp.register_comm_hook(None,
    fp16_compress_hook)``).

    Example:
        >>> from ember.distributed.algorithms.ddp_comm_hooks import default_hooks
        >>> default_hooks.fp16_compress_hook.__name__
        'fp16_compress_hook'
    """
    from .... import float16
    return _compress_hook(float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    """As ``fp16_compress_hook``, in bfloat16."""
    from .... import bfloat16
    return _compress_hook(bfloat16, process_group, bucket)


def _wrapper(dtype_name, hook):
    def hook_with_compression(state, bucket):
        from .... import _dtype
        buffer = bucket.buffer()
        dt = getattr(_dtype, dtype_name)
        bucket.set_buffer(buffer.to(dt))        # torch rounds the buffer to 16 bits first
        fut = hook(state, bucket)

        def decompress(fut):
            buffer.copy_(fut.value())
            return buffer
        return fut.then(decompress)
    return hook_with_compression


def fp16_compress_wrapper(hook):
    """``hook`` applied to the bucket rounded to float16."""
    return _wrapper("float16", hook)


def bf16_compress_wrapper(hook):
    """``hook`` applied to the bucket rounded to bfloat16."""
    return _wrapper("bfloat16", hook)
