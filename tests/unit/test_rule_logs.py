"""What a rule's log holds when its job fails: the reason of a failure exabench explains, the
traceback of one it does not (a bug to report)."""

import pytest

from exabench.errors import ExabenchError
from exabench.io import logged


def test_an_explained_failure_leaves_its_reason_and_no_traceback(tmp_path):
    log = tmp_path / "logs" / "acceptance.log"
    with pytest.raises(ExabenchError):
        with logged(log) as out:
            out.write("FAILED gemm.tiny [peak_fraction]: fail\n")
            raise ExabenchError("exabench: acceptance FAILED: 1 of 1 runs: gemm.tiny")
    assert log.read_text() == ("FAILED gemm.tiny [peak_fraction]: fail\n"
                               "exabench: acceptance FAILED: 1 of 1 runs: gemm.tiny\n")


def test_a_bug_leaves_its_traceback(tmp_path):
    log = tmp_path / "plots.log"
    with pytest.raises(KeyError):
        with logged(log):
            {}["missing"]
    text = log.read_text()
    assert text.startswith("Traceback (most recent call last):") and text.rstrip().endswith("KeyError: 'missing'")
