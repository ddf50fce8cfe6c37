"""A dependency-free progress bar: epoch, step, loss, samples/s and ETA on one line."""
import sys
import time


class Progress:
    """Call ``update(n_samples, loss)`` per step; ``close()`` ends the epoch's line.

    On a terminal the line redraws in place; elsewhere (logs, CI) one line per epoch is
    printed, so output stays readable.
    """

    def __init__(self, epoch, epochs, steps, stream=None, width=24):
        self.epoch, self.epochs, self.steps, self.width = epoch, epochs, steps, width
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.step, self.samples, self.loss, self.start = 0, 0, float("nan"), time.perf_counter()

    def update(self, n, loss):
        self.step += 1
        self.samples += n
        self.loss = loss
        if self.tty:
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self):
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        frac = self.step / max(self.steps, 1)
        bar = "#" * int(frac * self.width)
        eta = elapsed / max(frac, 1e-9) - elapsed
        return (f"epoch {self.epoch:>{len(str(self.epochs))}}/{self.epochs} "
                f"[{bar:<{self.width}}] {self.step}/{self.steps} loss {self.loss:.4f} "
                f"{self.samples / elapsed:,.0f} samples/s ETA {eta:4.1f}s")

    def close(self, extra=""):
        self.stream.write(("\r" if self.tty else "") + self.line() + extra + "\n")
        self.stream.flush()
