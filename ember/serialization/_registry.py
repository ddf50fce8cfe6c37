"""``torch.serialization``'s registry of storage locations (``register_package``: a tagger
naming where a storage lives at save, a deserializer placing it at load), the CRC-32 and
``skip_data`` switches of ``save``, and the storage type helpers."""
import ember

__all__ = ["register_package", "default_restore_location", "get_crc32_options", "set_crc32_options",
           "skip_data", "StorageType", "normalize_storage_type", "storage_to_tensor_type"]


def _on(storage):
    return getattr(getattr(storage, "device", None), "type", None)


def _cpu_tag(storage):
    return "cpu" if _on(storage) == "cpu" else None


def _cpu_deserialize(storage, location):
    return storage if location == "cpu" else None


def _cuda_tag(storage):
    return f"cuda:{storage.device.index or 0}" if _on(storage) == "cuda" else None


def _cuda_deserialize(storage, location):
    if location.startswith("cuda"):
        from ._api import validate_cuda_device
        return storage.cuda(validate_cuda_device(location))
    return None


def _meta_tag(storage):
    return "meta" if _on(storage) == "meta" else None


def _meta_deserialize(storage, location):
    return storage._moved(ember.device("meta")) if location == "meta" else None


_package_registry = [(10, _cpu_tag, _cpu_deserialize), (20, _cuda_tag, _cuda_deserialize),
                     (22, _meta_tag, _meta_deserialize)]
_DEFAULTS = list(_package_registry)


def register_package(priority, tagger, deserializer):
    """Register ``tagger(storage) -> location or None`` (asked at save, lowest ``priority``
    first) and ``deserializer(storage, location) -> storage or None`` (asked at load, for a
    file's cpu storage and its saved location), e.g. for a device of one's own.

    Example:
        >>> import io, ember
        >>> seen = []
        >>> def tag(s): return None
        >>> def restore(s, loc): seen.append(loc); return None
        >>> ember.serialization.register_package(5, tag, restore)
        >>> buf = io.BytesIO(); ember.save(ember.ones(2), buf); _ = buf.seek(0)
        >>> ember.load(buf), seen
        (tensor([1., 1.]), ['cpu'])
        >>> ember.serialization._registry._package_registry.pop(0)[0]
        5
    """
    _package_registry.append((priority, tagger, deserializer))
    _package_registry.sort(key=lambda e: e[0])


def location_tag(storage):
    """The location the first tagger of the registry gives ``storage``."""
    for _, tagger, _ in _package_registry:
        loc = tagger(storage)
        if loc:
            return loc
    raise RuntimeError("don't know how to determine data location of " + ember.typename(storage))


def default_restore_location(storage, location):
    """``storage`` placed at ``location`` by the first deserializer of the registry that
    takes it (what ``load`` does without ``map_location``).

    Example:
        >>> s = ember.ones(2).untyped_storage()
        >>> ember.serialization.default_restore_location(s, "cpu") is s
        True
    """
    for _, _, fn in _package_registry:
        result = fn(storage, location)
        if result is not None:
            return result
    raise RuntimeError("don't know how to restore data location of " + ember.typename(storage) +
                       " (tagged with " + location + ")")


_config = {"crc32": True, "skip_data": False}


def get_crc32_options():
    """Whether ``save`` computes each record's CRC-32 (the default) or writes 0."""
    return _config["crc32"]


def set_crc32_options(compute_crc32):
    """Make ``save`` compute each record's CRC-32 or not (writing 0: faster; zip tools then
    report bad CRCs, ``load`` does not check them).

    Example:
        >>> ember.serialization.set_crc32_options(False)
        >>> ember.serialization.get_crc32_options()
        False
        >>> ember.serialization.set_crc32_options(True)
    """
    _config["crc32"] = bool(compute_crc32)


class skip_data:
    """Within the block, ``save`` writes each storage's record with its size but no bytes
    (the space is left empty: zeros, to be filled in a separate pass) and ``load`` gives
    tensors of the saved shapes, dtypes and strides whose storages are not read (left
    uninitialized). ``materialize_fake_tensors`` is kept, as torch's (ember has no fake
    tensors).

    Example:
        >>> import io, ember
        >>> buf = io.BytesIO()
        >>> with ember.serialization.skip_data():
        ...     ember.save(ember.randn(2, 3), buf)
        >>> _ = buf.seek(0); ember.load(buf)
        tensor([[0., 0., 0.],
                [0., 0., 0.]])
    """

    def __init__(self, materialize_fake_tensors=False):
        self.materialize_fake_tensors = materialize_fake_tensors

    def __enter__(self):
        self._old, _config["skip_data"] = _config["skip_data"], True

    def __exit__(self, *exc):
        _config["skip_data"] = self._old


class StorageType:
    """A storage type as a legacy checkpoint names it.

    Example:
        >>> print(ember.serialization.StorageType("HalfStorage"))
        StorageType(dtype=torch.float16)
    """

    def __init__(self, name):
        self._dtype = getattr(ember, name).dtype

    dtype = property(lambda self: self._dtype)

    def __str__(self):
        return f"StorageType(dtype={self.dtype})"


def normalize_storage_type(storage_type):
    """The ``ember`` storage class of the same name as ``storage_type``.

    Example:
        >>> ember.serialization.normalize_storage_type(ember.FloatStorage) is ember.FloatStorage
        True
    """
    return getattr(ember, storage_type.__name__)


def storage_to_tensor_type(storage):
    """The legacy tensor type of a typed storage (``FloatStorage`` -> ``FloatTensor``).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     ember.serialization.storage_to_tensor_type(ember.FloatStorage(2))
        <class 'torch.FloatTensor'>
    """
    name = type(storage).__name__
    if name == "TypedStorage":      # (ember's legacy storage classes make TypedStorages)
        name = next(n for n in _LEGACY if getattr(ember, n).dtype is storage.dtype)
    return getattr(ember, name.replace("Storage", "Tensor"))


_LEGACY = [p + "Storage" for p in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short",
                                   "Char", "Byte", "Bool", "ComplexFloat", "ComplexDouble")]
