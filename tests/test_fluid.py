"""The fluid-flow bandwidth sharing of gpusim.engine.fluid: weighted max-min fair rates, re-solved
only for the connected component a starting or ending flow belongs to."""

import random

import pytest
import simpy

from gpusim.engine.fluid import FluidSystem


def reference_rates(flows, capacities):
    """Weighted max-min fair rates of all ``flows`` solved together (progressive filling)."""
    free = dict(capacities)
    rate = {}
    unfrozen = list(flows)
    while unfrozen:
        best, bottleneck = 1.0, None
        for res, cap in free.items():
            use = sum(f.max_rate * f.count * f.demands.get(res, 0.0) for f in unfrozen)
            if use > 1e-12 and max(0.0, cap) / use < best:
                best, bottleneck = max(0.0, cap) / use, res
        if bottleneck is None:
            rate.update({id(f): f.max_rate for f in unfrozen})
            break
        for f in [f for f in unfrozen if f.demands.get(bottleneck, 0.0) > 0]:
            rate[id(f)] = best * f.max_rate
            for res, d in f.demands.items():
                free[res] -= best * f.max_rate * f.count * d
            unfrozen.remove(f)
    return rate


def test_two_flows_share_a_link_and_a_third_elsewhere_does_not_disturb_them():
    env = simpy.Environment()
    fluid = FluidSystem(env, {"a": 10.0, "b": 10.0})
    ends = {}

    def start(name, at, work, resource):
        yield env.timeout(at)
        flow = fluid.add_flow(1.0, work, {resource: 1.0}, max_rate=1e30, label=name)
        yield flow.done
        ends[name] = env.now

    env.process(start("x", 0.0, 10.0, "a"))
    env.process(start("y", 0.0, 10.0, "a"))
    env.process(start("z", 0.5, 2.0, "b"))  # alone on b: 10/s, done at 0.7
    env.run()
    # x and y get 5/s each on a, whatever z does on b
    assert ends == pytest.approx({"x": 2.0, "y": 2.0, "z": 0.7})


def test_a_flow_ending_frees_its_share_for_the_flows_it_shared_with():
    env = simpy.Environment()
    fluid = FluidSystem(env, {"a": 10.0})
    ends = {}

    def start(name, work):
        flow = fluid.add_flow(1.0, work, {"a": 1.0}, max_rate=1e30, label=name)
        yield flow.done
        ends[name] = env.now

    env.process(start("short", 5.0))
    env.process(start("long", 15.0))
    env.run()
    # both at 5/s until the short one ends at 1 s; then 10 left at 10/s
    assert ends == pytest.approx({"short": 1.0, "long": 2.0})


@pytest.mark.parametrize("seed", range(6))
def test_rates_after_every_event_equal_a_global_solve(seed):
    """Solving only the component of a changed flow gives every active flow the rate a solve of all
    flows together gives (max-min fairness splits over connected components)."""
    rng = random.Random(seed)
    capacities = {f"r{i}": rng.choice((1.0, 2.0, 5.0, 10.0)) for i in range(12)}
    env = simpy.Environment()
    fluid = FluidSystem(env, capacities)

    def start(at):
        yield env.timeout(at)
        demands = {r: rng.choice((0.5, 1.0, 2.0)) for r in rng.sample(sorted(capacities), rng.choice((1, 1, 2, 3)))}
        flow = fluid.add_flow(rng.choice((1.0, 4.0)), rng.uniform(0.5, 3.0), demands,
                              max_rate=rng.choice((0.3, 1.0, 1e30)))
        yield flow.done

    for _ in range(60):
        env.process(start(rng.uniform(0.0, 4.0)))
    checked = 0
    while env.peek() != float("inf"):
        env.step()
        expected = reference_rates(fluid.flows, capacities)
        for f in fluid.flows:
            assert f.rate == pytest.approx(expected[id(f)], rel=1e-12, abs=1e-15)
        checked += len(fluid.flows)
    assert checked > 100  # the sample really overlapped flows


def test_a_flow_shorter_than_the_clocks_resolution_ends():
    # a flow of 1e-17 s at t = 2.49 s, where the clock's float resolution is 4.4e-16 s: it must end at
    # once, not reschedule itself at the same instant forever
    env = simpy.Environment()
    fluid = FluidSystem(env, {"link": 1e12})
    ended = []

    def later():
        yield env.timeout(2.4931169760132685)
        flow = fluid.add_flow(1.0, 1.0, {"link": 1e-5}, max_rate=1e30)  # 1e-5 bytes at 1e12 B/s: 1e-17 s
        yield flow.done
        ended.append(env.now)

    env.process(later())
    env.run(until=10.0)
    assert ended == [2.4931169760132685]
