"""Descriptors mutated at random (seeded): the NVDLA front-end either runs the task or refuses it with
a DlaError; never another exception, never a hang (every poll is bounded)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pydla.errors import DlaError
from tests.firmware.test_nvdla_firmware import _conv_sdp_pdp, _net_patch, _two_lut_sdps, run_task

pytest.importorskip("flatbuffers")
from pydla.loadable.nvdla import samples

MUTATIONS = 40


def _mutate(seed: int) -> Any:
    rng = random.Random(seed)

    def patch(lo: Any, task: Any, buffers: Any) -> None:
        for _ in range(rng.randint(1, 4)):
            entry = rng.randrange(4)  # network, operations, surfaces, dependency graph
            buf = buffers[lo.address_list[task.address_list[entry]].mem_id].array
            at = rng.randrange(min(buf.size, 2048 if entry != 2 else buf.size))
            buf[at] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    return patch


CASES = {"conv_sdp": lambda: (samples.conv_sdp_loadable(), None),
         "conv_sdp_pdp": lambda: (_conv_sdp_pdp(5), None),
         "bdma": lambda: (samples.bdma_loadable(), None),
         "luts": lambda: (_two_lut_sdps()[0], _net_patch(num_luts=2, lut_data_index=4))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mutated_descriptors_run_or_are_refused(case: str) -> None:
    refused = ran = 0
    for seed in range(MUTATIONS):
        lo, base = CASES[case]()
        mutate = _mutate(seed)

        def patch(lo: Any, task: Any, buffers: Any, base: Any = base, mutate: Any = mutate) -> None:
            if base is not None:
                base(lo, task, buffers)
            mutate(lo, task, buffers)
        try:
            run_task(lo, "nv_full", patch=patch)
            ran += 1
        except DlaError:
            refused += 1
    assert refused + ran == MUTATIONS and refused > 0
