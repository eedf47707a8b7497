"""The ring header's indices are stored and loaded with one aligned 4-byte access each: another
process never sees one half-written. With struct.pack_into (how they were written before) the
reader of the same hammering saw about 100,000 zeros a second here."""

from __future__ import annotations

import mmap
import sys

import pytest

from pydla.testing.fuzz_ring import hammer_index
from pydla.uapi.ring import CQ_TAIL, HEADER_SIZE, SQ_TAIL, header_words


@pytest.mark.parametrize("word", [SQ_TAIL, CQ_TAIL], ids=["sq_tail", "cq_tail"])
def test_an_index_another_process_keeps_storing_never_goes_back(word: int) -> None:
    result = hammer_index(1.0, word=word, min_changes=1000)
    assert result.changes >= 1000, result.summary()  # the two processes did run at the same time
    assert result.regressions == 0 and result.zeros == 0, result.summary()


def test_header_words_are_the_header_u32_by_u32() -> None:
    m = mmap.mmap(-1, 4096)
    words = header_words(m)
    assert (words.format, words.itemsize, len(words)) == ("I", 4, HEADER_SIZE // 4)
    words[SQ_TAIL] = 0xDEADBEEF
    assert m[4 * SQ_TAIL:4 * SQ_TAIL + 4] == (0xDEADBEEF).to_bytes(4, sys.byteorder)
    with pytest.raises(BufferError):
        m.close()  # a view exists: the rule is to release it first
    words.release()
    m.close()


def test_a_header_that_is_not_4_byte_aligned_is_refused() -> None:
    m = mmap.mmap(-1, 4096)
    view = memoryview(m)[1:]
    with pytest.raises(RuntimeError, match="not 4-byte aligned"):
        header_words(view)  # type: ignore[arg-type]
    view.release()
    m.close()
