"""torch.distributed.elastic.multiprocessing.errors: ``@record`` on a worker's entry point
writes the exception that ends it to ``TORCHELASTIC_ERROR_FILE`` (when the launcher set one),
in torch's JSON layout, then re-raises it, so the launcher can report the first failure."""
import faulthandler
import functools
import json
import os
import time
import traceback


class ChildFailedError(Exception):
    """Raised by a launcher when worker processes failed: ``failures`` maps a global rank to
    its failure (torch's ProcessFailure)."""

    def __init__(self, name, failures):
        self.name, self.failures = name, failures
        super().__init__(f"{name} FAILED: ranks {sorted(failures)}")


class ErrorHandler:
    """Writes a worker's uncaught exception to the file ``TORCHELASTIC_ERROR_FILE`` names."""

    def initialize(self):
        """Dumps the Python stacks of all threads on a fatal signal, as torch's handler."""
        try:
            faulthandler.enable(all_threads=True)
        except Exception:   # noqa: BLE001  (no usable stderr: nothing to enable)
            pass

    def record_exception(self, e):
        """``e`` in the file ``TORCHELASTIC_ERROR_FILE`` names, if any (write_error_file)."""
        if path := os.environ.get("TORCHELASTIC_ERROR_FILE"):
            write_error_file(path, e)


def write_error_file(path, e, tb=None, **extra):
    """The exception ``e`` being handled (its traceback ``tb``, by default the current one) as
    torch's error file, ``{"message": {"message", "extraInfo": {"py_callstack", "timestamp"}}}``
    and ``extra``'s keys, written whole or not at all (a temporary file moved into place)."""
    with open(path + ".tmp", "w") as f:
        json.dump({"message": {"message": f"{type(e).__name__}: {e}", "extraInfo": {
            "py_callstack": traceback.format_exc() if tb is None else tb,
            "timestamp": str(int(time.time()))}}, **extra}, f)
    os.replace(path + ".tmp", path)


def get_error_handler():
    return ErrorHandler()


def record(fn, error_handler=None):
    """Decorate a worker's ``main``: an exception it raises is recorded (``ErrorHandler``) and
    re-raised; ``SystemExit(0)`` returns None, as in torch."""
    handler = error_handler or get_error_handler()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        handler.initialize()
        try:
            return fn(*args, **kwargs)
        except SystemExit as e:
            if e.code == 0:
                return None
            raise
        except ChildFailedError:
            raise
        except Exception as e:
            handler.record_exception(e)
            raise
    return wrapper
