"""Anomaly mode: remember each op's forward traceback, and fail on NaN gradients."""
import warnings

from .grad_mode import _Mode


class _Anomaly:
    enabled = False
    check_nan = True


anomaly = _Anomaly()


def is_anomaly_enabled():
    return anomaly.enabled


def is_anomaly_check_nan_enabled():
    return anomaly.check_nan


def set_anomaly_enabled(enabled, check_nan=True):
    """Turn anomaly mode on or off for the process (``set_detect_anomaly`` without the
    context manager)."""
    anomaly.enabled, anomaly.check_nan = bool(enabled), bool(check_nan)


class set_detect_anomaly(_Mode):
    """Turn anomaly detection on or off (also as a context manager)."""

    def __init__(self, mode, check_nan=True):
        self._prev = (anomaly.enabled, anomaly.check_nan)
        anomaly.enabled, anomaly.check_nan = bool(mode), bool(check_nan)
        self._args = (mode, check_nan)

    def clone(self):
        return self.__class__(*self._args)

    def __enter__(self):
        """(The mode was set on construction, as torch's is: entering changes nothing.)"""

    def __exit__(self, *exc):
        anomaly.enabled, anomaly.check_nan = self._prev


class detect_anomaly(_Mode):
    """Within the block, a backward error names the forward op and shows the traceback of the
    forward call; a NaN produced in backward raises.

    Example:
        >>> import ember
        >>> with ember.autograd.detect_anomaly():
        ...     x = ember.tensor([0.0], requires_grad=True)
        ...     y = ember.sqrt(x) * 0
        ...     y.sum().backward()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output.
    """

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime "
                      "and should only be enabled for debugging.", stacklevel=2)

    def clone(self):
        return self.__class__(self.check_nan)

    def __enter__(self):
        self._prev = (anomaly.enabled, anomaly.check_nan)
        anomaly.enabled, anomaly.check_nan = True, self.check_nan

    def __exit__(self, *exc):
        anomaly.enabled, anomaly.check_nan = self._prev
