"""Auto-wrap policies of FSDP1, as ``torch.distributed.fsdp.wrap``: ``policy(module, recurse,
nonwrapped_numel)`` is asked with ``recurse=True`` whether to look inside ``module`` and
with ``recurse=False`` whether to wrap it (``nonwrapped_numel``: its parameters not yet in a
wrapped child)."""


def _module_wrap_policy(module, recurse, nonwrapped_numel, module_classes):
    return True if recurse else isinstance(module, tuple(module_classes))


class ModuleWrapPolicy:
    """Wrap every module of one of ``module_classes`` (and the root).

    Example:
        >>> import ember
        >>> from ember.distributed.fsdp.wrap import ModuleWrapPolicy
        >>> policy = ModuleWrapPolicy({ember.nn.Linear})
        >>> policy(ember.nn.Linear(2, 2), recurse=False, nonwrapped_numel=6)
        True
    """

    def __init__(self, module_classes):
        self._module_classes = set(module_classes)

    def __call__(self, module, recurse, *args, **kwargs):
        return _module_wrap_policy(module, recurse, -1, self._module_classes)

    def __repr__(self):
        return f"ModuleWrapPolicy({self._module_classes})"


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    """Wrap modules of the classes ``transformer_layer_cls`` (use ``functools.partial``).

    Example:
        >>> import functools, ember
        >>> from ember.distributed.fsdp.wrap import transformer_auto_wrap_policy
        >>> p = functools.partial(transformer_auto_wrap_policy,
        ...                       transformer_layer_cls={ember.nn.TransformerEncoderLayer})
        >>> p(ember.nn.Linear(2, 2), recurse=False, nonwrapped_numel=6)
        False
    """
    return _module_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls)


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    """Wrap the modules for which ``lambda_fn(module)`` is true.

    Example:
        >>> import ember
        >>> from ember.distributed.fsdp.wrap import lambda_auto_wrap_policy
        >>> lambda_auto_wrap_policy(ember.nn.ReLU(), False, 0, lambda m: True)
        True
    """
    return True if recurse else lambda_fn(module)


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wrap a module once its not-yet-wrapped parameters reach ``min_num_params``; never look
    inside ``force_leaf_modules`` (MultiheadAttention) nor wrap ``exclude_wrap_modules``
    (ModuleList, ModuleDict).

    Example:
        >>> import functools, ember
        >>> from ember.distributed.fsdp.wrap import size_based_auto_wrap_policy
        >>> p = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
        >>> p(ember.nn.Linear(10, 10), recurse=False, nonwrapped_numel=110)
        True
    """
    from ... import nn
    force_leaf_modules = {nn.MultiheadAttention} if force_leaf_modules is None \
        else force_leaf_modules
    exclude_wrap_modules = {nn.ModuleList, nn.ModuleDict} if exclude_wrap_modules is None \
        else exclude_wrap_modules
    is_large = nonwrapped_numel >= min_num_params
    if recurse:
        return is_large and not isinstance(module, tuple(force_leaf_modules))
    return is_large and not isinstance(module, tuple(exclude_wrap_modules))


def _recursive_wrap(module, policy, wrap, ignored_modules, ignored_params, only_children):
    """torch's ``_recursive_wrap``: returns (module or its wrapper, numel wrapped)."""
    from .fully_sharded_data_parallel import FullyShardedDataParallel
    if isinstance(module, FullyShardedDataParallel):
        return module, 0
    numel = sum(p.numel() for p in module.parameters() if id(p) not in ignored_params)
    if not policy(module=module, recurse=True, nonwrapped_numel=numel):
        return module, 0
    wrapped = 0
    for name, child in list(module.named_children()):
        if child in ignored_modules:
            continue
        new, n = _recursive_wrap(child, policy, wrap, ignored_modules, ignored_params, False)
        if new is not child:
            setattr(module, name, new)
        wrapped += n
    if not only_children and policy(module=module, recurse=False,
                                    nonwrapped_numel=numel - wrapped):
        return wrap(module), numel
    return module, wrapped
