"""Progress inside an epoch: step, minibatches/s, the share of time spent waiting for data, loss.

On a terminal one line is rewritten in place (twice a second); in a log (a pod's stdout) a line
is written every ``log_every_s`` seconds, so a four-minute epoch is not silent and a data stall
shows as a high wait share without any metrics stack.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    """Reports the steps of one epoch; :meth:`update` after each step, :meth:`close` at the end."""

    def __init__(
        self,
        epoch: int,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        log_every_s: float = 10.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.epoch, self.total = epoch, total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = 0.5 if self.tty else log_every_s
        self._clock = clock
        self._start = self._last = self._clock()
        self.steps = 0
        self.wait_s = 0.0
        self.loss = float("nan")

    def line(self) -> str:
        """The report as of now."""
        elapsed = max(1e-9, self._clock() - self._start)
        return (
            f"epoch {self.epoch} step {self.steps}/{self.total}  {self.steps / elapsed:6.1f} minibatches/s  "
            f"data wait {self.wait_s / elapsed:5.1%}  loss {self.loss:.4f}"
        )

    def update(self, wait_s: float, loss: float) -> None:
        """One step done: ``wait_s`` spent waiting for its minibatch, its ``loss``."""
        self.steps += 1
        self.wait_s += wait_s
        self.loss = loss
        now = self._clock()
        if self.enabled and now - self._last >= self.every_s:
            self._last = now
            self._write()

    def _write(self) -> None:
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends the in-place line on a terminal (the epoch report follows on its own line)."""
        if self.enabled and self.tty and self.steps:
            self._write()
            self.stream.write("\n")
            self.stream.flush()
