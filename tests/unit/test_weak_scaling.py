"""Weak scaling's problem size follows the ranks that started: the layout's on the machine, fewer in a rehearsal."""
from types import SimpleNamespace

from exabench.benchmarks.analytics.common import local_block, nodes_started


def test_the_planned_launch_holds_the_layouts_nodes():
    assert nodes_started({"nodes": 128, "ranks_per_node": 6}, 768) == 128
    assert nodes_started({"nodes": 2, "ranks_per_node": 1}, 2) == 2
    assert nodes_started({"nodes": 1, "ranks_per_node": 2}, 2) == 1


def test_fewer_ranks_than_planned_shrink_the_problem_with_them():
    # Perlmutter's 128-node K-Means (4 ranks a node) rehearsed on 2 ranks: one node's rows, not 128 nodes'
    layout = {"nodes": 128, "ranks_per_node": 4}
    assert nodes_started(layout, 2) == 1
    assert nodes_started(layout, 9) == 3
    second_of_two = SimpleNamespace(size=2, rank=1)
    assert local_block("20000rows", 16, "float64", second_of_two, nodes_started(layout, 2)) == (20000, 10000, 20000)
    # never more nodes than planned, whatever started
    assert nodes_started({"nodes": 2, "ranks_per_node": 1}, 8) == 2
