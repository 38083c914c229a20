"""The pure rule after a run out of GPU memory (harpd.recovery.gpu_escalation): larger, never the same."""

from __future__ import annotations

import pytest

from harpd.recovery.gpu_escalation import GpuConfig, GpuProposal, gpu_changes, gpu_resources, next_gpu_step

ONE_A100 = GpuConfig("a100", 1, 0, 80.0, 1)


def _proposal(nxt, why="61.2 of 80 GiB per GPU needed (formula)"):
    return GpuProposal(ONE_A100, nxt, why, options={"gres": "gpu:a100:2"}, env={"HARP_DNN_ZERO": "1"})


def test_not_a_gpu_out_of_memory_is_left_to_the_plain_rule():
    assert next_gpu_step(None, 1, 3) is None


@pytest.mark.parametrize(
    "nxt",
    [
        GpuConfig("a100", 2, 1, 80.0, 1),  # more GPUs, a stage that shards
        GpuConfig("a100", 1, 1, 80.0, 1),  # a higher stage alone
        GpuConfig("h200", 1, 0, 141.0, 1),  # a larger GPU type
        GpuConfig("a100", 8, 3, 80.0, 2),  # several nodes
    ],
)
def test_a_larger_configuration_is_the_next_attempt(nxt):
    step = next_gpu_step(_proposal(nxt), 1, 3)
    assert step is not None and not step.stop and step.proposal is not None and step.proposal.next == nxt
    assert step.reason.startswith("ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; next: ")
    assert nxt.label() in step.reason and step.reason.endswith("attempt 2 of 3")


@pytest.mark.parametrize("nodes", [1, 2, None])
def test_the_same_configuration_is_never_the_next_one(nodes):
    """Spread over other nodes it holds as much per GPU: still the same configuration."""
    step = next_gpu_step(_proposal(GpuConfig("a100", 1, 0, 80.0, nodes)), 1, 3)
    assert step is not None and step.stop and step.proposal is None
    assert step.reason == (
        "ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; the planner proposed the same configuration again: "
        "not resubmitted"
    )


def test_a_configuration_no_larger_in_any_way_is_refused():
    failed = GpuConfig("a100", 4, 2, 80.0, 1)
    smaller = GpuConfig("a100-40", 2, 2, 40.0, 1)
    step = next_gpu_step(GpuProposal(failed, smaller, "cheaper"), 1, 3)
    assert step is not None and step.stop
    assert "proposed 2 x a100-40 (40 GiB), ZeRO 2, which is no larger: not resubmitted" in step.reason
    # fewer but larger GPUs, the same memory in all: larger per GPU, accepted
    ok = next_gpu_step(GpuProposal(failed, GpuConfig("h200", 2, 2, 160.0, 1), "fits"), 1, 3)
    assert ok is not None and not ok.stop


def test_nothing_fits_stops_with_the_planners_one_line_reason():
    why = "no configured GPU fits: the nearest, 8 x a100 at zero=0, needs 95.1 GiB per GPU; try zero=auto"
    step = next_gpu_step(_proposal(None, why), 1, 3)
    assert step is not None and step.stop and "\n" not in step.reason
    assert step.reason == f"ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0; no larger configuration fits: {why}"


def test_no_attempts_left():
    step = next_gpu_step(_proposal(GpuConfig("a100", 2, 1, 80.0, 1)), 3, 3)
    assert step is not None and step.stop
    assert step.reason == "attempt 3 of 3 ran out of GPU memory on 1 x a100 (80 GiB), ZeRO 0: no attempts left"


def test_a_chain_of_proposals_ends_within_max_attempts():
    """Whatever a planner proposes, the chain takes at most max_attempts runs, each configuration new."""
    configs = [ONE_A100, GpuConfig("a100", 2, 1, 80.0, 1), GpuConfig("a100", 4, 2, 80.0, 1)]
    ran = [configs[0]]
    attempt = 1
    while True:
        nxt = configs[min(attempt, len(configs) - 1)]
        step = next_gpu_step(GpuProposal(ran[-1], nxt, "x"), attempt, 3)
        assert step is not None
        if step.stop:
            break
        assert nxt.key() not in {c.key() for c in ran}
        ran.append(nxt)
        attempt += 1
    assert len(ran) == 3 and "no attempts left" in step.reason


def test_the_registered_changes_and_resources():
    gpu = {"options": {"gres": "gpu:a100:4", "nodes": "2", "ntasks-per-node": "4"}}
    assert gpu_resources(gpu) == {"gres": "gpu:a100:4", "nodes": 2}
    assert gpu_resources(None) == {}
    assert [c.option for c in gpu_changes(gpu, "why")] == ["gres", "nodes", "ntasks-per-node"]
