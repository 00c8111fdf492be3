"""Progress a person can read in a terminal and in a log file.

On a terminal it is a tqdm bar. When the output is a file or a pipe (a SLURM log, `| tee`), a bar
redrawn with carriage returns is unreadable, so it is a plain log line instead, at most every
`every_s` seconds and at the end: what it counts, done of total, the rate, and the time left.

    with Progress(total=40, unit="message", desc="tiny × tiny: messages") as bar:
        bar.update(8, dialogues="2/4", tokens_per_s=45.2)
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tqdm import tqdm

log = logging.getLogger("esc.progress")


def duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `1 h 12 min`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class Progress:
    """A labelled count toward `total`: a tqdm bar on a terminal, plain log lines otherwise.

    `enabled=False` shows nothing; `tty=None` asks whether stderr is a terminal.
    """

    def __init__(
        self,
        total: int,
        unit: str,
        desc: str,
        enabled: bool = True,
        every_s: float = 30.0,
        tty: bool | None = None,
    ) -> None:
        self.total, self.unit, self.desc, self.enabled, self.every_s = total, unit, desc, enabled, every_s
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.done = 0
        self.fields: dict[str, Any] = {}
        self._start = self._last = time.monotonic()
        self._said: tuple = ()  # (count, fields) of the last plain line: the closing line is not said twice
        self._bar: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and self.tty:
            self._bar = tqdm(total=self.total, unit=self.unit, desc=self.desc)
        elif self.enabled:
            log.info("%s: 0/%d %ss", self.desc, self.total, self.unit)
        return self

    def update(self, n: int = 0, **fields: Any) -> None:
        """Count `n` more and show `fields` (e.g. `failed=1`, `tok_s=45.2`) beside the count."""
        self.done += n
        self.fields.update(fields)
        if self._bar is not None:
            self._bar.update(n)
            if fields:
                self._bar.set_postfix(self.fields, refresh=False)
        elif self.enabled and time.monotonic() - self._last >= self.every_s:
            self._log()

    def line(self) -> str:
        """What a plain line says: `desc: 12/40 messages (30%), 1.2 messages/s, about 23 s left, k=v`."""
        elapsed = time.monotonic() - self._start
        parts = [f"{self.desc}: {self.done}/{self.total} {self.unit}s"]
        if self.total:
            parts[0] += f" ({100 * self.done / self.total:.0f}%)"
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            parts.append(f"{rate:.3g} {self.unit}s/s")
            if self.done < self.total:
                parts.append(f"about {duration((self.total - self.done) / rate)} left")
        parts.append(f"{duration(elapsed)} so far")
        parts += [f"{k}={v}" for k, v in self.fields.items()]
        return ", ".join(parts)

    def _log(self) -> None:
        self._last = time.monotonic()
        said = (self.done, tuple(self.fields.items()))
        if said != self._said:
            log.info("%s", self.line())
        self._said = said

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            self._log()
