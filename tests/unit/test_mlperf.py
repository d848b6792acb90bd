"""MLPerf-HPC conventions: strong-scaling score, mllog wrapper + compliance checker, LR schedules, LAMB."""

from __future__ import annotations

import json
import math

import pytest

from exabench.benchmarks.mlperf import harness as mlperf


def test_strong_scaling_drops_fastest_and_slowest():
    assert mlperf.strong_scaling_score([5.0, 1.0, 3.0, 2.0, 4.0]) == pytest.approx(3.0)
    assert mlperf.strong_scaling_score([10.0, 10.0, 40.0]) == pytest.approx(10.0)
    times = [491.0, 480.0, 502.0, 515.0, 470.0]
    assert mlperf.strong_scaling_score(times, "deepcam") == pytest.approx((480 + 491 + 502) / 3)


def test_strong_scaling_matches_the_packages_olympic_average():
    from mlperf_logging.result_summarizer.result_summarizer import _compute_olympic_average
    times = [12.5, 11.0, 13.25, 10.5, 14.0, 11.75, 12.0, 13.0, 10.75, 15.5]
    assert mlperf.strong_scaling_score(times, "cosmoflow") == pytest.approx(
        _compute_olympic_average(list(times), 0, 1))


def test_strong_scaling_needs_enough_runs():
    with pytest.raises(ValueError, match="2 runs given, at least 3"):
        mlperf.strong_scaling_score([1.0, 2.0])
    with pytest.raises(ValueError, match="cosmoflow: 5 runs given, at least 10"):
        mlperf.strong_scaling_score([1.0] * 5, "cosmoflow")


def _fake_run(path, quality_per_epoch, division="open"):
    """A CosmoFlow-shaped log written through MLPerfLog and run_to_target, no training."""
    log = mlperf.MLPerfLog(path, 0, "cosmoflow", division=division, platform="test")
    log.start("init_start")
    log.event("cache_clear", True)
    for key, value in (("number_of_nodes", 1), ("accelerators_per_node", 0), ("global_batch_size", 8),
                       ("seed", 1), ("opt_name", "SGD"), ("opt_base_learning_rate", 0.01),
                       ("opt_learning_rate_warmup_epochs", 4), ("opt_learning_rate_warmup_factor", 1.0),
                       ("opt_learning_rate_decay_boundary_epochs", [32, 64]),
                       ("opt_learning_rate_decay_factor", 0.25), ("train_samples", 16), ("eval_samples", 4)):
        log.event(key, value)
    log.end("init_stop")
    result = mlperf.run_to_target(log, len(quality_per_epoch), lambda e: (1.0, 16, 0.5),
                                  lambda e: quality_per_epoch[e - 1], "eval_error", 0.124, False, lambda: None)
    log.close()
    return result


def test_log_passes_the_compliance_checker_when_the_target_is_reached(tmp_path):
    result = _fake_run(tmp_path / "ok.log", [0.4, 0.2, 0.1, 0.05])
    assert result.reached and len(result.epochs) == 3  # stops at the first epoch on target
    lines = [json.loads(x.split(":::MLLOG ", 1)[1]) for x in (tmp_path / "ok.log").read_text().splitlines()]
    keys = [x["key"] for x in lines]
    assert keys[:5] == ["submission_benchmark", "submission_org", "submission_division", "submission_status",
                        "submission_platform"]
    assert keys.count("epoch_start") == 3 and keys[-1] == "run_stop"
    assert lines[-1]["metadata"]["status"] == "success"
    ok, out = mlperf.compliance_check(tmp_path / "ok.log")
    assert ok, out


def test_compliance_checker_rejects_a_run_that_missed_the_target(tmp_path):
    result = _fake_run(tmp_path / "bad.log", [0.4, 0.3])
    assert not result.reached
    ok, out = mlperf.compliance_check(tmp_path / "bad.log")
    assert not ok and "FAILED" in out


def test_cosmoflow_lr_schedule_is_the_references():
    from exabench.training.optim import cosmoflow_lr
    sched = {32: 0.25, 64: 0.125}
    lr = [cosmoflow_lr(e, 0.001, 1024, 64, 4, sched) for e in range(70)]
    peak = 0.001 * 1024 / 64
    assert lr[0] == pytest.approx(0.001)
    assert lr[2] == pytest.approx(0.001 + 2 * (peak - 0.001) / 4)
    assert lr[4] == lr[32] == pytest.approx(peak)
    assert lr[33] == lr[64] == pytest.approx(0.25 * peak)
    assert lr[65] == pytest.approx(0.125 * peak)


# The reference's schedulers (mlcommons/hpc deepcam/src/deepCam/utils/schedulers.py, commit 2c627d4),
# run outside this tree with start LR 1 and stepped after each optimizer step: the LR of steps 0..
_REFERENCE_MULTISTEP_W4_F3_M8_8_10 = [1.0, 1.5, 2.0, 2.5] + [2.5] * 9 + [0.025] * 2 + [0.0025] * 5
_REFERENCE_COSINE_W4_T10_ETA01 = {0: 0.0, 3: 0.75, 4: 0.75, 5: 0.7340933677959249, 9: 0.42500000000000004,
                                  14: 0.1, 15: 0.12202456766718092, 24: 1.0000000000000042, 34: 0.1}


def test_deepcam_lr_factors_are_the_reference_schedulers():
    from exabench.training.optim import deepcam_lr_factor as f
    got = [f(s, 4, 3.0, "multistep", [8, 8, 10]) for s in range(20)]
    assert got == pytest.approx(_REFERENCE_MULTISTEP_W4_F3_M8_8_10)
    for step, lr in _REFERENCE_COSINE_W4_T10_ETA01.items():
        assert f(step, 4, 1.0, "cosine_annealing", t_max=10, eta_min_ratio=0.1) == pytest.approx(lr), step
    # No warmup: torch's MultiStepLR and CosineAnnealingLR, milestones not shifted.
    assert [f(s, 0, 1.0, "multistep", [8]) for s in (0, 7, 8)] == pytest.approx([1, 1, 0.1])
    assert f(5, 0, 1.0, "cosine_annealing", t_max=10, eta_min_ratio=0.1) == pytest.approx(0.55)


def test_deepcam_decays_at_the_reference_step_for_warmup_400_milestone_800():
    """The default settings: the reference's MultiStepLRWarmup keeps 399/400 of the start LR from step
    400 and multiplies it by 0.1 at step 1201 (800 + 400 + 1), which is where ours decays, through
    the scheduler the workload builds."""
    import torch
    from exabench.benchmarks.mlperf.deepcam import DeepCAMParams, lr_scheduler
    p = DeepCAMParams()
    assert (p.warmup_steps, p.milestones, p.warmup_factor, p.decay_rate) == (400, "800", 1.0, 0.1)
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=p.start_lr)
    sched = lr_scheduler(opt, p, [800])
    used = []
    for _ in range(1300):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    decays = [s for s in range(1, 1300) if used[s] < used[s - 1]]
    assert decays == [1201]
    assert used[400] == used[1200] == pytest.approx(p.start_lr * 399 / 400)
    assert used[1201] == pytest.approx(p.start_lr * 399 / 400 * 0.1)
    assert used[:2] == pytest.approx([0.0, p.start_lr / 400])


def test_lamb_step_by_hand():
    import torch
    from exabench.training.optim import LAMB
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    opt = LAMB([w], lr=0.1, betas=(0.9, 0.999), eps=0.0, weight_decay=0.0, max_grad_norm=1.0)
    w.grad = torch.tensor([0.6, 0.8]) * 10  # norm 10: clipped to norm 1
    opt.step()
    # Step 1 with bias correction: m_hat = g, v_hat = g^2 -> update = sign(g) = [1, 1];
    # trust = ||w|| / ||update|| = 5 / sqrt(2).
    trust = 5 / math.sqrt(2)
    assert w.detach().tolist() == pytest.approx([3 - 0.1 * trust, 4 - 0.1 * trust], rel=1e-5)


def test_a_closed_division_claim_needs_the_closed_configuration(tmp_path):
    """Tiny runs are open; closed is refused, naming every broken rule, unless the run is the
    reference network and target on the benchmark's own data set."""
    from types import SimpleNamespace

    from exabench.benchmarks.mlperf import cosmoflow, deepcam
    from exabench.errors import ConfigError

    tiny = deepcam.DeepCAM.resolve_params("tiny", {}, "(test)", "params")
    assert tiny.division == "open"
    closed_tiny = deepcam.DeepCAM.resolve_params("tiny", {"division": "closed"}, "(test)", "params")
    with pytest.raises(ConfigError, match="division") as err:
        deepcam.DeepCAM().run(closed_tiny, None)  # refused before anything runs or is written
    for broken in ("height = 96", "model_width = 8", "middle_blocks = 2", "data_dir = ''"):
        assert broken in str(err.value)
    full = deepcam.DeepCAM.resolve_params("full", {"division": "closed", "data_dir": str(tmp_path)}, "(t)", "p")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "a.h5").write_bytes(b"")
    with pytest.raises(ConfigError, match="holds 1 training and 0 validation samples .closed: 121266 and 15158"):
        mlperf.require_closed_rules(full, deepcam.CLOSED_PARAMS, deepcam.CLOSED_SAMPLES, deepcam.count_samples)
    mlperf.require_closed_rules(full, deepcam.CLOSED_PARAMS, deepcam.CLOSED_SAMPLES, lambda root: (121266, 15158))
    with pytest.raises(ConfigError, match="target_iou = 0.5"):
        mlperf.require_closed_rules(SimpleNamespace(**{**vars(full), "target_iou": 0.5}), deepcam.CLOSED_PARAMS,
                                    deepcam.CLOSED_SAMPLES, lambda root: (121266, 15158))

    for cls in (cosmoflow.CosmoFlow, cosmoflow.CosmoFlowKeras):
        p = cls.resolve_params("tiny", {"division": "closed"}, "(test)", "params")
        with pytest.raises(ConfigError, match=r"sample_size = 32 .closed: 128.*conv_size = 8"):
            cls().run(p, SimpleNamespace(world=SimpleNamespace(size=1)))
    full = cosmoflow.CosmoFlow.resolve_params("full", {"division": "closed", "data_dir": str(tmp_path)}, "(t)", "p")
    with pytest.raises(ConfigError, match="holds 0 training and 0 validation samples .closed: 524288 and 65536"):
        cosmoflow.closed_rules(full)
