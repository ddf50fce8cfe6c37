"""Saving and loading: PyTorch's ``.pt`` formats (zip and pre-1.6 legacy) and safetensors.

``ember.save`` writes the zip archive ``torch.save`` writes, so PyTorch reads ember's files with
``torch.load(f, weights_only=True)``; ``ember.load`` reads files ``torch.save`` wrote. ember never
imports torch: torch's global names (``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``,
``torch.float16``...) are written and read as plain names and mapped to ember's own objects.

A zip archive holds (records stored uncompressed, data 64-byte aligned so it can be mapped)::

    archive/data.pkl              the object, pickle protocol 2; each tensor is a rebuild call
                                  whose storage is the persistent id
                                  ('storage', storage_type, key, location, numel)
    archive/.format_version  archive/.storage_alignment  archive/byteorder
    archive/data/<key>            one storage's raw bytes, little-endian, written once however
                                  many views share it
    archive/version               "3"
    archive/.data/serialization_id

See https://pytorch.org/docs/stable/notes/serialization.html for PyTorch's side.

The code, by part: ``_save.py`` pickles and writes both formats, ``_unpickler.py`` holds the
weights-only allowlist and the unpickler that maps torch's names to ember's rebuild functions,
``_load.py`` reads the zip and legacy files, ``_safetensors.py`` the safetensors format.
"""
from ._api import (LoadEndianness, SourceChangeWarning,  # noqa: F401
                   check_module_version_greater_or_equal, get_default_load_endianness,
                   get_default_mmap_options, get_unsafe_globals_in_checkpoint, location_tag,
                   mkdtemp, set_default_load_endianness, set_default_mmap_options,
                   validate_cuda_device)
from ._load import load
from ._registry import _package_registry  # noqa: F401  (torch.serialization's, read by tests)
from ._registry import (StorageType, default_restore_location, get_crc32_options,  # noqa: F401
                        normalize_storage_type, register_package, set_crc32_options, skip_data,
                        storage_to_tensor_type)
from ._safetensors import load_safetensors, save_safetensors
from ._save import save
from ._unpickler import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals

__all__ = ["save", "load", "add_safe_globals", "clear_safe_globals", "get_safe_globals",
           "safe_globals", "save_safetensors", "load_safetensors", "SourceChangeWarning",
           "mkdtemp", "check_module_version_greater_or_equal", "location_tag",
           "validate_cuda_device", "LoadEndianness", "get_default_load_endianness",
           "set_default_load_endianness", "get_unsafe_globals_in_checkpoint",
           "get_default_mmap_options", "set_default_mmap_options", "register_package",
           "default_restore_location", "get_crc32_options", "set_crc32_options", "skip_data",
           "StorageType", "normalize_storage_type", "storage_to_tensor_type"]
