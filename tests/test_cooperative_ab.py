"""bench.cooperative_ab without a GPU: the plain twin of a loaded kernel drops only the cooperative guarantee."""
import types

from bench.cooperative_ab import plain
from evo.kernel import LaunchSpec


def test_plain_twin_of_a_device_launched_kernel_keeps_its_geometry():
    spec = LaunchSpec(grid=(132, 1, 1), block=(384, 1, 1), smem=1024, workspace=64, cooperative=True)
    k = plain(types.SimpleNamespace(spec=spec))
    assert k.spec.cooperative is False and k.spec.grid == spec.grid and k.spec.workspace == spec.workspace


def test_plain_twin_of_a_host_launched_kernel_rebuilds_its_launch_configs():
    k = plain(types.SimpleNamespace(cooperative=True, _blocks={("a", "b", "c"): "config built cooperative"}))
    assert k.cooperative is False and k._blocks == {}
