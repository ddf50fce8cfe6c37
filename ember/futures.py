"""``ember.futures``: the result of an asynchronous operation, as ``torch.futures``.

A Future made by a collective (``Work.get_future()``) completes when it is waited on: ember
has no background thread driving communication, so ``wait()``/``value()`` poll the engine.
"""


class Future:
    """A value that will be set later; ``then`` chains callbacks, as ``torch.futures.Future``.

    Example:
        >>> from ember.futures import Future
        >>> f = Future(); g = f.then(lambda fut: fut.value() * 2)
        >>> f.set_result(21); g.wait()
        42
    """

    def __init__(self, *, devices=None):
        self._done, self._value, self._exc, self._callbacks, self._waiter = \
            False, None, None, [], None

    def done(self):
        return self._done

    def wait(self):
        """Block until the value is set (driving the operation behind it), and return it."""
        if not self._done and self._waiter is not None:
            try:
                self._waiter()
            except Exception as e:
                if not self._done:
                    self.set_exception(e)
        if not self._done:
            raise RuntimeError("Future.wait() on a Future that nothing will complete")
        return self.value()

    def value(self):
        if not self._done:
            return self.wait()
        if self._exc is not None:
            raise self._exc
        return self._value

    def set_result(self, result):
        if self._done:
            raise RuntimeError("Future can only be marked completed once.")
        self._done, self._value = True, result
        self._run_callbacks()

    def set_exception(self, result):
        self._done, self._exc = True, result
        self._run_callbacks()

    def _run_callbacks(self):
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            cb(self)

    def add_done_callback(self, callback):
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def then(self, callback):
        """A Future of ``callback(self)``, run once this one completes."""
        child = Future()
        child._waiter = self.wait

        def run(fut):
            try:
                child.set_result(callback(fut))
            except Exception as e:
                child.set_exception(e)
        self.add_done_callback(run)
        return child


def collect_all(futures):
    """A Future of the list of ``futures``, complete when all are.

    Example:
        >>> from ember.futures import Future, collect_all
        >>> a, b = Future(), Future(); a.set_result(1); b.set_result(2)
        >>> [f.value() for f in collect_all([a, b]).wait()]
        [1, 2]
    """
    out = Future()
    out._waiter = lambda: (wait_all(futures), out.done() or out.set_result(list(futures)))
    if all(f.done() for f in futures):
        out.set_result(list(futures))
    return out


def wait_all(futures):
    """The values of ``futures``, waiting for each.

    Example:
        >>> from ember.futures import Future, wait_all
        >>> f = Future(); f.set_result(3); wait_all([f])
        [3]
    """
    return [f.wait() for f in futures]
