"""`exabench reproduce` checks the containers the records ran in: a runtime or image digest other
than the archived site file's (or than the image given with --image) is NOT REPRODUCED, each
named with the run; runs of one stack on different images, and digests not checked at job start,
are warned about."""

from __future__ import annotations

from exabench.analysis.archive import Check, check_report
from exabench.analysis.container_check import container_findings

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _record(run_id, runtime="charliecloud", digest=A, verified=True, stack="cpu"):
    container = None if runtime is None else {"runtime": runtime, "image": "/i/cpu.oci", "stack": stack,
                                              "digest": digest, "digest_verified": verified}
    return {"run_id": run_id, "provenance": {"container": container}}


def test_records_that_ran_the_pinned_image_reproduce():
    differs, warnings, summary = container_findings([_record("r1"), _record("r2")],
                                                    {"runtime": "charliecloud", "digest": A}, ("/i/cpu.oci", A))
    assert (differs, warnings) == ([], [])
    assert summary == [f"charliecloud cpu image {A}: 2 run(s)"]


def test_another_runtime_or_digest_than_the_site_pins_is_named_and_fails_the_check():
    records = [_record("r1"), _record("r2", digest=B), _record("r3", runtime="apptainer"), _record("r4", runtime=None)]
    differs, warnings, _ = container_findings(records, {"runtime": "charliecloud", "digest": A})
    assert differs == [
        f"r2: ran image /i/cpu.oci with digest {B}; the archived site file pins container.digest {A}",
        "r3: ran with container runtime apptainer; the archived site file says container.runtime charliecloud",
        "r4: ran with container runtime none; the archived site file says container.runtime charliecloud"]
    assert any("runs of stack cpu ran 2 different images" in w and "r2" in w for w in warnings)
    check = Check(identical=["tables/results.csv"], container_differs=differs, container_warnings=warnings)
    report = check_report(check, "a.tar.gz")
    assert not check.ok and report.endswith("NOT REPRODUCED: see above")
    assert "  container differs: r2: ran image /i/cpu.oci with digest" in report


def test_the_image_given_must_be_the_one_the_runs_ran():
    differs, _, _ = container_findings([_record("r1")], {"runtime": "charliecloud"}, ("/new/cpu.oci", B))
    assert differs == [f"r1: ran image digest {A}; the image /new/cpu.oci given to reproduce has {B}"]


def test_unverified_digests_warn_and_no_site_file_compares_nothing():
    differs, warnings, _ = container_findings([_record("r1", verified=False)], None)
    assert differs == [] and warnings == [
        f"r1: image digest {A[:19]} was not checked against the image when the run started (the image was not "
        "on the machine that rendered it)"]
    assert container_findings([_record("n", runtime=None)], {})[0] == []  # a native site, native records
