"""Properties of the multi-GPU step engine on random layer-by-layer pipelines."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from gpusim.config import load_hardware
from gpusim.engine.cluster import ChunkModel, LayerCollective, LayoutPlan, StageModel, run_step
from gpusim.engine.collectives import CollectivePlan, fabric_of

RATE = 1e11  # bytes per second of every port below


def _plan(collective: str, nbytes: float, intra: bool, nic: bool) -> CollectivePlan:
    return CollectivePlan(collective, "ring", "Simple", nbytes, 8, 2e-6, nbytes if intra else 0.0,
                          nbytes if nic else 0.0, RATE, RATE)


layer = st.tuples(st.floats(0.0, 1e-2), st.floats(0.0, 2e-2),  # forward and backward compute
                  # collectives: bytes, on NVLink, on the network, where in the layer's compute
                  st.lists(st.tuples(st.floats(1e4, 1e9), st.booleans(), st.booleans(), st.floats(0.0, 1.0)),
                           max_size=2),
                  st.floats(0.0, 1e9))  # parameter (and gradient) bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.lists(layer, min_size=1, max_size=3), st.sampled_from([0, 1, 3]),
       st.booleans(), st.booleans(), st.booleans(), st.floats(0.0, 1e9), st.sampled_from([0.0, 0.25]),
       st.booleans())
def test_a_steps_time_splits_into_compute_communication_bubble_and_optimizer(
        p, m, layers, zero_stage, overlap, tp_overlap, p2p_overlap, send_bytes, sm_fraction, tied):
    fabric = dataclasses.replace(fabric_of(load_hardware("dgx_h100")), intra_port_bytes_per_s=RATE,
                                 nic_port_bytes_per_s=RATE, collective_sm_fraction=sm_fraction)
    # some collectives hold the compute, some run beside it
    comm = tuple(tuple(LayerCollective(_plan("all_reduce", n, intra, nic), f, min(1.0, f + n / 1e10))
                       for n, intra, nic, f in c) for _, _, c, _ in layers)
    chunk = ChunkModel(sum(f for f, _, _, _ in layers), sum(b for _, b, _, _ in layers), len(layers),
                       forward_layer_s=tuple(f for f, _, _, _ in layers),
                       backward_layer_s=tuple(b for _, b, _, _ in reversed(layers)),
                       layer_comm_forward=comm, layer_comm_backward=comm[::-1],
                       grad_bytes=sum(w for *_, w in layers), param_bytes=sum(w for *_, w in layers),
                       layer_param_bytes=tuple(w for *_, w in layers),
                       grad_layers=tuple((w,) for *_, w in reversed(layers)),
                       grad_layers_at=tuple((b / (f + b) if f + b > 0 else 1.0,) for f, b, _, _ in reversed(layers)),
                       send_bytes=send_bytes)
    stages = [StageModel([chunk], optimizer_s=1e-3) for _ in range(p)]
    lp = LayoutPlan("1f1b", p, m, 1, zero_stage=zero_stage, overlap=overlap, tp_overlap=tp_overlap,
                    p2p_overlap=p2p_overlap, bucket_bytes=2.5e8,
                    dp_plan=lambda collective, nbytes: _plan(collective, nbytes, True, False),
                    p2p_plan=lambda nbytes, src, dst: _plan("send_recv", nbytes, True, False),
                    tied_plan=_plan("all_reduce", 1e8, False, True) if tied else None)
    stats = run_step(fabric, stages, lp, record_spans=True)
    # every second of every stage is compute, exposed communication, bubble or optimizer
    parts = stats.compute_s + stats.exposed_comm_s + stats.bubble_s + stats.optimizer_s
    assert parts == pytest.approx(stats.step_s, rel=1e-9, abs=1e-12)
    assert min(stats.exposed_comm_s, stats.bubble_s) >= -1e-12
    # the compute is what the layers say, whatever the collectives do to it
    assert stats.compute_s == pytest.approx(m * (chunk.forward_s + chunk.backward_s), rel=1e-9, abs=1e-12)
    assert stats.step_s >= m * (chunk.forward_s + chunk.backward_s) + 1e-3 - 1e-12
    for span in stats.spans:
        assert -1e-12 <= span.start_s <= span.end_s <= stats.step_s + 1e-12
    # the layers' spans carry that compute, each lasting at least its own (longer where collectives
    # hold SMs), and lie inside their pass's span on the compute track
    layers = [x for x in stats.spans if x.track.endswith(" layers")]
    assert sum(dict(x.args)["compute_s"] for x in layers) == pytest.approx(p * stats.compute_s, rel=1e-9, abs=1e-12)
    passes = {(x.track.split()[1], x.name): x for x in stats.spans if x.track.endswith(" compute")}
    for x in layers:
        assert x.end_s - x.start_s >= dict(x.args)["compute_s"] * (1 - 1e-9) - 1e-15
        outer = passes[(x.track.split()[1], x.name.split()[0])]
        assert outer.start_s - 1e-12 <= x.start_s <= x.end_s <= outer.end_s + 1e-12
