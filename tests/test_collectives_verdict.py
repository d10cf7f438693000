"""The collectives check's verdict on plain data: the outlier rule (``slow_members``), the slow
node (by its all_reduce with the other nodes, and by its send/recv pairs), the slow rank, nobody
in a balanced or noisy set; and the measurement file read safely."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from monitor.collectives.measurement import (
    Measurement, MeasurementError, NodePairAllReduce, PairTiming, RankSite, from_json, read,
)
from monitor.collectives.verdict import judge, slow_members

MS = 1e-3


def _measurement(hosts: list[str], pair_time, backend: str = "gloo", node_time=None) -> Measurement:
    """``hosts[r]`` is rank r's node; ``pair_time(a, b) -> (latency_s, transfer_s)``;
    ``node_time(rank, node, peer) -> seconds``: that rank's all_reduce with every rank of ``peer``
    (every pair of nodes; none without it)."""
    world = len(hosts)
    pairs = tuple(PairTiming(a, b, *pair_time(a, b), 1 << 20) for a in range(world) for b in range(a + 1, world))
    sites = tuple(RankSite(r, host, hosts[:r].count(host), "cpu") for r, host in enumerate(hosts))
    nodes = list(dict.fromkeys(hosts))
    node_all_reduce = tuple(NodePairAllReduce(r, hosts[r], peer, 1 << 20, node_time(r, hosts[r], peer))
                            for r in range(world) for peer in nodes if peer != hosts[r]) if node_time else ()
    return Measurement(backend, world, "2.x", sites, (), pairs, (("join", 2.0), ("pairs", 0.5)), node_all_reduce)


def _noisy(seed: int, base_latency: float = 0.1 * MS, base_transfer: float = 0.5 * MS):
    """A balanced machine as this one measures it: every pair near the same figures, a few of
    them hit by the scheduler (up to 8x, a millisecond or so)."""
    rng = random.Random(seed)

    def pair_time(_a, _b):
        hit = rng.random() < 0.15
        return (base_latency * (rng.uniform(1, 8) if hit else rng.uniform(0.8, 1.3)),
                base_transfer * (rng.uniform(1, 4) if hit else rng.uniform(0.8, 1.3)))
    return pair_time


def test_the_rule_names_the_member_every_slow_pair_shares():
    pairs = [("a", "b", 40.0), ("b", "c", 42.0), ("a", "c", 1.0), ("b", "d", 39.0), ("a", "d", 1.1), ("c", "d", 0.9)]
    [slow] = slow_members(pairs, floor_s=1.0)
    assert slow.member == "b" and slow.own_s == 40.0 and slow.usual_s == pytest.approx(1.0)
    assert slow.factor == pytest.approx(40.0)


def test_the_rule_names_nobody_when_a_slow_pair_cannot_be_pinned():
    # Three members and one slow pair: a and b both look slow, and either could be.
    assert slow_members([("a", "b", 30.0), ("b", "c", 1.0), ("a", "c", 1.0)], floor_s=1.0) == []
    # Two members: the one pair belongs to both.
    assert slow_members([("a", "b", 30.0)], floor_s=1.0) == []
    # Everything slow: no usual to compare with.
    assert slow_members([("a", "b", 30.0), ("b", "c", 31.0), ("a", "c", 29.0)], floor_s=1.0) == []


def test_a_member_is_named_by_most_of_its_pairs_not_by_one_unlucky_one():
    # CI's three ranks on one loaded machine, the third behind a slow link: rank 0 descheduled
    # through one pair's round trips, and a little through another's. Rank 2's transfers are slow
    # with everyone; rank 0's latency is slow with rank 1 only.
    def pair_time(a, b):
        latency = {(0, 1): 2.5 * MS, (0, 2): 0.9 * MS, (1, 2): 0.08 * MS}[(a, b)]
        return latency, 41.5 * MS if 2 in (a, b) else 0.6 * MS

    assert [(o.ranks, o.metric) for o in judge(_measurement(["gpu-01"] * 3, pair_time)).outliers] == \
        [((2,), "transfer")]


def test_the_rule_needs_both_the_factor_and_the_floor():
    pairs = [("a", "b", 5.0), ("a", "c", 5.0), ("b", "c", 1.0), ("b", "d", 1.0), ("c", "d", 1.0), ("a", "d", 5.0)]
    assert [s.member for s in slow_members(pairs, floor_s=1.0)] == ["a"]
    assert slow_members(pairs, floor_s=10.0) == []            # 4 slower: under the floor
    assert slow_members(pairs, floor_s=1.0, factor=6.0) == []  # 5x: under the factor


def _noisy_all_reduce(seed: int, base: float = 1 * MS, slow: str | None = None, times: float = 1.0):
    """Each rank's best all_reduce with a node as this machine measures it: near ``base``, a few hit
    by the scheduler (up to 4x, a few milliseconds); ``times`` as long with node ``slow``."""
    rng = random.Random(seed)

    def node_time(_rank, node, peer):
        hit = rng.random() < 0.15
        seconds = base * (rng.uniform(1, 4) if hit else rng.uniform(0.8, 1.3))
        return seconds * times if slow in (node, peer) else seconds
    return node_time


@pytest.mark.parametrize("seed", range(40))
def test_a_balanced_noisy_set_names_nobody(seed: int):
    for hosts in (["vm"] * 4, ["n1", "n1", "n2", "n2", "n3", "n3"], ["n1", "n2", "n3", "n4"], ["n1", "n2", "n3"]):
        verdict = judge(_measurement(hosts, _noisy(seed), node_time=_noisy_all_reduce(seed)))
        assert verdict.outliers == (), [o.line() for o in verdict.outliers]
        assert verdict.lines()[-1] == "no node, rank or link stands out"


def test_a_node_whose_link_is_slow_is_named_with_its_ranks():
    hosts = ["gpu-01", "gpu-01", "gpu-07", "gpu-07", "gpu-09", "gpu-09"]
    noise = _noisy(1)

    def pair_time(a, b):
        latency, transfer = noise(a, b)
        slow = "gpu-07" in (hosts[a], hosts[b]) and hosts[a] != hosts[b]
        return (latency + 0.2 * MS, transfer * 40) if slow else (latency, transfer)

    verdict = judge(_measurement(hosts, pair_time))
    [node] = verdict.outliers
    assert (node.kind, node.node, node.ranks, node.metric) == ("node", "gpu-07", (2, 3), "transfer")
    assert node.line().startswith("node gpu-07 is ") and "slower than the others on send/recv (1.0 MiB in" in node.line()
    assert node.line().endswith("pairs with gpu-07 are slow: check its NIC/IB (ibstat, the link's error counters)")
    assert 20 < node.factor < 80


def test_a_node_slow_on_all_reduce_is_named_with_how_many_times():
    hosts = ["gpu-01", "gpu-01", "gpu-04", "gpu-04", "gpu-07", "gpu-07", "gpu-09", "gpu-09"]

    def node_time(_rank, node, peer):
        return 30 * MS if "gpu-07" in (node, peer) else 5 * MS

    verdict = judge(_measurement(hosts, lambda a, b: (0.1 * MS, 0.5 * MS), node_time=node_time))
    [node] = verdict.outliers
    assert (node.kind, node.node, node.ranks, node.metric, node.nbytes) == ("node", "gpu-07", (4, 5), "all_reduce", 1 << 20)
    assert node.line() == ("node gpu-07 is 6x slower on all_reduce than the others (1.0 MiB in 30 ms with it, "
                           "5.00 ms between the others): all_reduce with gpu-07 is slow: check its NIC/IB "
                           "(ibstat, the link's error counters)")
    assert ": all_reduce by pairs of nodes 1.0 MiB 17 ms (median pair); " in verdict.summary()  # 3 of 6 with gpu-07
    assert verdict.lines()[-1] == node.line()


def test_a_node_slow_on_all_reduce_and_on_its_pairs_is_named_by_both_all_reduce_first():
    hosts = ["n1", "n2", "n3", "n4", "n5"]
    noise, node_noise = _noisy(3), _noisy_all_reduce(3, slow="n4", times=8.0)

    def pair_time(a, b):
        latency, transfer = noise(a, b)
        return (latency, transfer * 30) if 3 in (a, b) else (latency, transfer)

    verdict = judge(_measurement(hosts, pair_time, node_time=node_noise))
    assert [(o.kind, o.node, o.ranks, o.metric) for o in verdict.outliers] == \
        [("node", "n4", (3,), "all_reduce"), ("node", "n4", (3,), "transfer")]  # no rank of it besides
    assert 5 < verdict.outliers[0].factor < 12
    assert verdict.lines()[-2].startswith("node n4 is ") and " slower on all_reduce than the others " in verdict.lines()[-2]
    assert verdict.lines()[-1].endswith("pairs with n4 are slow: check its NIC/IB (ibstat, the link's error counters)")


def test_two_nodes_cannot_pin_a_slow_all_reduce_on_either():
    verdict = judge(_measurement(["a", "a", "b", "b"], lambda a, b: (0.1 * MS, 0.5 * MS),
                                 node_time=lambda rank, node, peer: 90 * MS))
    assert verdict.outliers == () and verdict.notes == ("two nodes: a slow link between a and b cannot be pinned on either",)
    assert "all_reduce by pairs of nodes 1.0 MiB 90 ms (median pair)" in verdict.summary()


def test_a_slow_all_reduce_needs_a_node_in_every_slow_pair_and_more_than_the_noise():
    hosts = ["n1", "n2", "n3", "n4"]
    pairs = lambda a, b: (0.1 * MS, 0.5 * MS)  # noqa: E731

    def one_slow_pair(_rank, node, peer):  # a pair of nodes hit once, no node in common with the rest
        return 40 * MS if {node, peer} == {"n1", "n2"} else 1 * MS
    assert judge(_measurement(hosts, pairs, node_time=one_slow_pair)).outliers == ()
    # 3 ms against 0.5 ms: six times, and under gloo's floor (a busy CPU) but far over NCCL's.
    small = _noisy_all_reduce(5, base=0.5 * MS, slow="n3", times=6.0)
    assert judge(_measurement(hosts, pairs, node_time=small)).outliers == ()
    small = _noisy_all_reduce(5, base=0.5 * MS, slow="n3", times=6.0)
    assert [(o.node, o.metric) for o in judge(_measurement(hosts, pairs, "nccl", small)).outliers] == \
        [("n3", "all_reduce")]


def test_a_slow_rank_on_one_node_is_named_and_its_node_is_not():
    def pair_time(a, b):
        return (0.1 * MS, 30 * MS) if 3 in (a, b) else (0.1 * MS, 0.5 * MS)

    verdict = judge(_measurement(["vm"] * 4, pair_time))
    [rank] = verdict.outliers
    assert (rank.kind, rank.ranks, rank.node) == ("rank", (3,), "vm")
    assert rank.title() == "rank 3 on node vm is 60x slower than the other ranks of its node on send/recv " \
                           "(1.0 MiB in 30 ms against 0.50 ms)"


def test_a_rank_slow_with_other_nodes_only_is_its_rail():
    hosts = ["n1", "n1", "n2", "n2", "n3", "n3"]

    def pair_time(a, b):
        across = hosts[a] != hosts[b]
        return (0.1 * MS, 20 * MS if across and 4 in (a, b) else 1 * MS)

    [rank] = judge(_measurement(hosts, pair_time)).outliers
    assert (rank.kind, rank.ranks, rank.node) == ("rank-across-nodes", (4,), "n3")
    assert "check the NIC it uses" in rank.line()


def test_two_nodes_or_two_ranks_name_nobody_and_say_why():
    slow = judge(_measurement(["a", "b"], lambda a, b: (20 * MS, 90 * MS)))
    assert slow.outliers == () and slow.notes == ("two nodes: a slow link between a and b cannot be pinned on either",)
    assert judge(_measurement(["vm", "vm"], lambda a, b: (MS, MS))).notes == \
        ("two ranks: a slow link between them cannot be pinned on either",)


def test_nccl_is_judged_against_microseconds():
    def pair_time(a, b):
        return (8e-6, 600e-6) if 2 in (a, b) else (8e-6, 60e-6)  # 10x, 0.54 ms: a GPU's link at a tenth

    assert [o.ranks for o in judge(_measurement(["vm"] * 4, pair_time, backend="nccl")).outliers] == [(2,)]
    assert judge(_measurement(["vm"] * 4, pair_time, backend="gloo")).outliers == ()  # within the CPUs' noise


def _probe_json(**changes) -> dict:
    data = {"version": 1, "backend": "gloo", "world_size": 2, "torch": "2.x",
            "seconds": {"join": 1.0, "collectives": 0.2, "pairs": 0.1},
            "ranks": [{"rank": r, "local_rank": r, "host": "vm", "device": "cpu",
                       "collectives": [{"op": "all_reduce", "bytes": 4096, "seconds": [0.002, 0.001, 0.003]}],
                       "pairs": [{"a": 0, "b": 1, "latency_s": 1e-4, "transfer_s": 5e-4, "bytes": 1 << 20}] if r == 0 else []}
                      for r in range(2)]}
    data.update(changes)
    return data


def test_the_measurement_round_trips_and_gives_the_summary(tmp_path: Path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_probe_json()))
    measurement = read(path)
    assert [c.seconds for c in measurement.collectives] == [0.002, 0.002]  # each rank's median
    verdict = judge(measurement)
    assert verdict.summary() == ("collectives check (gloo, 2 ranks on 1 node, 1.3 s): all_reduce 4.0 KiB 2.00 ms "
                                 "(bus 0.00 GB/s); send/recv latency 0.10 ms, 1.0 MiB in 0.50 ms")
    assert json.loads(json.dumps(verdict.to_json()))["lines"] == verdict.lines()


@pytest.mark.parametrize("data, message", [
    ([], "not a collective test's measurement"),
    (_probe_json(world_size=3), "2 ranks reported, world size 3"),
    (_probe_json(ranks=[{"rank": 0}, {"rank": 0}]), "not 0 to world_size - 1"),
    (_probe_json(ranks=[{"rank": 0, "pairs": [{"a": 1, "b": 0}]}, {"rank": 1}]), "pair 1-0 outside the world"),
    (_probe_json(ranks=[{"rank": 0, "collectives": [{"op": "all_reduce", "bytes": 4, "seconds": ["x"]}]},
                        {"rank": 1}]), "is not a time or count"),
    (_probe_json(ranks=[{"rank": 0, "collectives": ["x"]}, {"rank": 1}]), "not an object"),
])
def test_a_bad_measurement_is_one_line(data, message: str):
    with pytest.raises(MeasurementError, match=message):
        from_json(data)


def test_the_all_reduce_of_nodes_is_read_as_each_rank_s_best_and_checked():
    data = _probe_json()
    data["ranks"][1]["host"] = "other"
    data["ranks"][0]["node_all_reduce"] = [{"peer": "other", "bytes": 1 << 20, "seconds": [0.009, 0.004, 0.006]}]
    data["ranks"][1]["node_all_reduce"] = [{"peer": "vm", "bytes": 1 << 20, "seconds": [0.005]}]
    measurement = from_json(data)
    assert measurement.node_all_reduce == (NodePairAllReduce(0, "vm", "other", 1 << 20, 0.004),
                                           NodePairAllReduce(1, "other", "vm", 1 << 20, 0.005))
    assert judge(measurement).node_all_reduce_s == pytest.approx(0.0045)
    assert from_json(_probe_json()).node_all_reduce == ()  # a file from before them, or one node
    for bad, message in (({"peer": "vm", "bytes": 4, "seconds": [0.1]}, "without another node"),
                         ({"peer": 7, "bytes": 4, "seconds": [0.1]}, "without another node"),
                         ({"peer": "other", "bytes": 4, "seconds": []}, "without another node"),
                         ({"peer": "gpu-99", "bytes": 4, "seconds": [0.1]}, "a node no rank is on")):
        data["ranks"][0]["node_all_reduce"] = [bad]
        with pytest.raises(MeasurementError, match=message):
            from_json(data)


def test_the_file_is_read_bounded_and_never_through_a_link(tmp_path: Path):
    real = tmp_path / "real.json"
    real.write_text(json.dumps(_probe_json()))
    link = tmp_path / "link.json"
    os.symlink(real, link)
    with pytest.raises(MeasurementError, match="link.json: Too many levels of symbolic links"):
        read(link)
    with pytest.raises(MeasurementError, match="missing.json: No such file"):
        read(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(MeasurementError, match="bad.json: not JSON"):
        read(tmp_path / "bad.json")


@pytest.mark.parametrize("world", [2, 3, 4, 7, 16])
def test_the_rounds_pair_every_rank_once_each_round_and_every_pair_once(world: int):
    from monitor.collectives.exercise import _circle_rounds

    rounds = _circle_rounds(world)
    seen = set()
    for partners in rounds:
        assert all(partners[partners[r]] == r and partners[r] != r for r in partners)
        seen |= {frozenset((a, b)) for a, b in partners.items()}
    assert len(seen) == world * (world - 1) // 2 and len(rounds) == world - 1 + world % 2


def test_a_big_world_gets_a_fixed_number_of_partners_each():
    from monitor.collectives.exercise import MAX_ROUNDS, _circle_rounds

    rounds = _circle_rounds(1000)
    assert len(rounds) == MAX_ROUNDS and all(len(partners) == 1000 for partners in rounds)


def test_a_rank_knows_itself_under_torchrun_and_under_srun():
    from monitor.collectives.exercise import _identity

    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "1234",
           "SLURM_JOB_NODELIST": "gpu-[07-09,12],cpu-1"}
    assert _identity(env) == (5, 8, 1)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("gpu-07", "21234")
    env.update(RANK="2", WORLD_SIZE="4", LOCAL_RANK="0")
    assert _identity(env) == (2, 4, 0)  # torchrun's, under srun too


def test_one_rank_has_figures_and_nothing_to_compare():
    data = _probe_json(world_size=1, ranks=_probe_json()["ranks"][1:])
    data["ranks"][0]["rank"] = 0
    verdict = judge(from_json(data))
    assert verdict.lines() == ["collectives check (gloo, 1 rank on 1 node, 1.3 s): all_reduce 4.0 KiB 2.00 ms (bus 0.00 GB/s)",
                               "no node, rank or link stands out"]
