"""Read-ahead policies: how many positions of an owned split the pipeline requests next.

``_fetch.Pipeline`` plans each unit by asking its policy ``want(split,
unit_rows, inflight)`` for every owned split, passing its current target unit
size and the split's positions in flight; the policy looks at what the
consumer side has buffered (the feed or stream it was built with) and answers
with a count (0: nothing now).

Rules:
* Row mode (:class:`RowDemand`): a split's share of a unit is
  ``ceil(unit_rows / owned)``; it is requested while its ready plus in-flight
  rows stay below ``share * io_queue_depth``, capped at
  ``transform_queue_depth * read_batch_size`` when that is set. A split whose
  row must raise requests nothing more.
* Packing (:class:`PackDemand`): every split aims at about
  ``max(L, 2**20 / owned)`` tokens per unit and ``io_queue_depth`` units
  buffered (buffered tokens plus in-flight documents at the mean document
  size seen so far, 128 before any), and at most its share of the byte budget
  (``read_ahead_bytes / (32 * owned)`` tokens, but at least one block of
  ``L``). Units start small for a fast first block and grow with
  ``unit_rows``. A split whose document must raise requests nothing more.
* Row mode's bytes are bounded by the pipeline itself (``_fetch``): its unit
  size shrinks with the row size and it admits units within the budget.
* Policies only read; they never change the feed, the streams or the pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from ._packing import SplitStream

TARGET_UNIT_TOKENS = 1 << 20
FIRST_DOC_GUESS = 128
DEFAULT_READ_AHEAD_BYTES = 256 * 2**20
BYTES_PER_BUFFERED_TOKEN = 32
"""A buffered token's share of the budget: 8 in the stream, 8 in its read batch while it is in
flight (twice while transformed), 16 in a yielded block's tokens and doc_ids."""


class ReadyRows(Protocol):
    """What :class:`RowDemand` reads of a feed (``_rows.RowFeed``, ``_columnar.ColumnarFeed``)."""

    error: list[BaseException | None]

    def ready(self, i: int) -> int: ...


@dataclass(frozen=True)
class RowDemand:
    """Row-mode read-ahead over one iteration's feed of ``owned`` splits."""

    feed: ReadyRows
    owned: int
    io_queue_depth: int
    read_batch_size: int
    transform_queue_depth: int | None

    def want(self, i: int, unit_rows: int, inflight: int) -> int:
        """Positions owned split ``i`` should request now."""
        feed = self.feed
        if feed.error[i] is not None:
            return 0
        quota = max(1, -(-unit_rows // self.owned))
        target = quota * self.io_queue_depth
        if self.transform_queue_depth is not None:
            target = min(target, max(1, self.transform_queue_depth * self.read_batch_size))
            quota = min(quota, target)
        return quota if feed.ready(i) + inflight < target else 0


class PackDemand:
    """Packing read-ahead over one iteration's streams."""

    def __init__(
        self,
        streams: list[SplitStream],
        length: int,
        io_queue_depth: int,
        read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
    ) -> None:
        self._streams = streams
        self._per_split = max(length, TARGET_UNIT_TOKENS // len(streams))
        self._depth = io_queue_depth
        self._most = max(length, read_ahead_bytes // (BYTES_PER_BUFFERED_TOKEN * len(streams)))
        """Buffered tokens per split at most: a share of the budget, but always one block."""
        self._doc_tokens = float(FIRST_DOC_GUESS)
        """Mean tokens per document (EOS included) of the last split that fetched any."""

    def want(self, i: int, unit_rows: int, inflight: int) -> int:
        """Documents owned split ``i`` should request now."""
        stream = self._streams[i]
        if stream.error is not None:
            return 0
        if stream.fetched_docs:
            self._doc_tokens = max(1.0, stream.fetched_tokens / stream.fetched_docs)
        per_split = self._per_split
        buffered = stream.stream_len() + inflight * self._doc_tokens
        if buffered >= min(per_split * self._depth, self._most):
            return 0
        # Units start small (fast first block) and grow with the pipeline's unit size.
        growing = -(-unit_rows // len(self._streams))
        return max(1, min(growing, math.ceil(per_split / self._doc_tokens)))
