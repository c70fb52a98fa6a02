"""An implausible compile speedup (146x on a CPU) is flagged in the check's summary, not featured."""

from __future__ import annotations

from gpuenv.verify.checks.compile import PLAUSIBLE, speedup_text


def test_a_plausible_speedup_is_the_summarys_figure() -> None:
    assert speedup_text(1.37) == "1.37x over eager on the NLP block"


def test_an_implausible_speedup_is_flagged_not_featured() -> None:
    text = speedup_text(146.2)
    assert "implausible" in text and "146x" in text and "over eager on the NLP block" not in text
    assert speedup_text(PLAUSIBLE) == f"{PLAUSIBLE:.2f}x over eager on the NLP block"
