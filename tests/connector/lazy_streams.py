"""A stand-in for CUDA streams and events on CPU tensors, for what no CUDA device here can show.

The transfer engine queues its CUDA copies through a
:class:`~kvtool.connector.transfer.DeviceQueue`. CUDA may run queued work at any
time its dependencies allow, and this machine has no GPU, so :class:`LazyQueue`
takes the least favourable legal schedule: nothing queued runs until something
needs it. A stream runs its work in order; ``wait_event`` and ``wait_stream``
queue "first run the other stream up to here"; an event marks a point in one
stream. The tests queue each read of the KV on the compute stream after the
engine's waits and then run it: the read sees exactly the copies those waits
force, so a missing wait reads stale bytes and a wait on another layer's event
either reads stale bytes (an earlier layer) or loads more than the layer
(a later one), which :attr:`LazyStream.ran` shows.

Only torch; no pytest (the vLLM-environment scripts import it too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


class LazyStream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.work: list[tuple[str, Callable[[], None]]] = []
        self.ran = 0  # how many of ``work`` have run

    def queue(self, label: str, action: Callable[[], None]) -> None:
        self.work.append((label, action))

    def run_to(self, mark: int) -> None:
        while self.ran < mark:
            _, action = self.work[self.ran]
            self.ran += 1
            action()

    def run_all(self) -> None:
        self.run_to(len(self.work))

    def wait_stream(self, other: LazyStream) -> None:
        mark = len(other.work)
        self.queue(f"wait {other.name}@{mark}", lambda: other.run_to(mark))

    def wait_event(self, event: LazyEvent) -> None:
        # As cudaStreamWaitEvent: the event's latest record at the time of the call.
        if event.mark is None:
            return
        stream, mark = event.mark
        self.queue(f"wait {stream.name}@{mark}", lambda: stream.run_to(mark))

    def labels(self, start: int = 0, stop: int | None = None) -> list[str]:
        return [label for label, _ in self.work[start:stop]]


class LazyEvent:
    def __init__(self) -> None:
        self.mark: tuple[LazyStream, int] | None = None

    def record(self, stream: LazyStream) -> None:
        self.mark = (stream, len(stream.work))
        stream.queue("record", lambda: None)

    def query(self) -> bool:
        return self.mark is None or self.mark[0].ran >= self.mark[1]

    def synchronize(self) -> None:
        if self.mark is not None:
            self.mark[0].run_to(self.mark[1])


class LazyQueue:
    """The engine's :class:`~kvtool.connector.transfer.DeviceQueue`: a compute stream
    (current unless inside :meth:`on`) and every stream the engine makes."""

    def __init__(self) -> None:
        self.compute = LazyStream("compute")
        self.streams: list[LazyStream] = []
        self._current = self.compute
        self.copies = 0  # copies run so far, on any stream

    def new_stream(self) -> LazyStream:
        stream = LazyStream(f"side{len(self.streams)}")
        self.streams.append(stream)
        return stream

    def current_stream(self) -> LazyStream:
        return self._current

    @contextmanager
    def on(self, stream: LazyStream) -> Iterator[LazyStream]:
        previous, self._current = self._current, stream
        try:
            yield stream
        finally:
            self._current = previous

    def new_event(self) -> LazyEvent:
        return LazyEvent()

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        def run() -> None:
            dst.copy_(src)
            self.copies += 1

        self._current.queue("copy", run)

    def read(self, what: Callable[[], Any]) -> Any:
        """A kernel on the compute stream that reads memory: queued after everything
        already there, then run (with what it waits for); returns what it read."""
        seen: list[Any] = []
        self.compute.queue("read", lambda: seen.append(what()))
        self.compute.run_all()
        return seen[0]

    def run_everything(self) -> None:
        for stream in [self.compute, *self.streams]:
            stream.run_all()
