"""DataPipes (``torch.utils.data.datapipes``): the base classes and decorators
(``datapipe``), and the built-in DataPipes (``iter``, ``map``), registered on import."""
from . import iter, map  # noqa: F401  (registers the functional forms)
from .datapipe import (DataChunk, DFIterDataPipe, IterDataPipe, MapDataPipe,  # noqa: F401
                       argument_validation, functional_datapipe,
                       guaranteed_datapipes_determinism, non_deterministic, runtime_validation,
                       runtime_validation_disabled)
