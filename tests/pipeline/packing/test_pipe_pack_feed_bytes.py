"""The packing feed's byte count (``_packing.PackFeed.held_bytes``): what the byte budget
``read_ahead_bytes`` counts for packing (deviation D40, docs/PIPELINE.md "Memory and threads"):
every token the owned splits' streams hold, EOS included, plus the blocks of the chunk being yielded.
"""

from __future__ import annotations

from elastic_loader._pipeline._packing import TOKEN_BYTES, PackFeed, SplitStream
from elastic_loader._pipeline._stats import Counters


def test_held_bytes_are_the_streams_tokens_plus_the_chunk_being_yielded() -> None:
    """Origin: a mutant that subtracted the chunk's bytes survived the mutation set."""
    streams = [SplitStream([5, 6, 1], [0], 0, 0), SplitStream([7, 1, 8, 9, 1], [0, 2], 0, 0)]
    feed = PackFeed(streams, eos=1, counters=Counters())
    assert feed.held_bytes() == 8 * TOKEN_BYTES
    feed.chunk_bytes = 4096
    assert feed.held_bytes() == 8 * TOKEN_BYTES + 4096
    feed.chunk_bytes = 0
    assert PackFeed([], eos=1, counters=Counters()).held_bytes() == 0
