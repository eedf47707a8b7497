"""A fuzz campaign over the firmware's mailbox (tests/test_fuzz.py's way): random and mutated commands
written into the command ring never stop the firmware, never leave it unable to answer, and every
answer is a well-formed message. More: ``PYDLA_FUZZ_CASES=50000 python -m pytest tests/hw/mcu``."""

from __future__ import annotations

import os

from pydla.testing.fuzz import run_campaign, standard_targets

CASES = int(os.environ.get("PYDLA_FUZZ_CASES", "0")) or 4000
SEED = 20261125


def test_mutated_mailbox_commands_never_stop_the_firmware() -> None:
    (target,) = standard_targets(b"", only=["mailbox"])
    report = run_campaign([target], cases=CASES, seed=SEED, case_timeout_s=20)
    assert not report.findings, report.summary()
    assert report.refused["mailbox"] > CASES // 10, report.summary()  # the mutations reach the checks
    assert report.accepted["mailbox"] > 0, report.summary()  # and some commands stay valid
