"""init_device_mesh / DeviceMesh: ranks laid out row-major, one process group per dimension
(each the line of the mesh through this rank), names, sub-meshes, and collectives on each
dimension's group summing over exactly that line."""
import numpy as np
import pytest

import mpigrad.distributed as dist
from mpigrad.distributed.device_mesh import DeviceMesh, init_device_mesh


@pytest.mark.parametrize("shape", ["(1, n)", "(n, 1)"])
def test_groups_are_the_lines_through_this_rank(rank, size, shape):
    dims = (1, size) if shape == "(1, n)" else (size, 1)
    mesh = init_device_mesh("cpu", dims, mesh_dim_names=("dp", "tp"))
    grid = np.arange(size).reshape(dims)
    assert mesh.shape == dims and mesh.ndim == 2 and mesh.size() == size
    coordinate = [int(c) for c in np.argwhere(grid == rank)[0]]
    assert mesh.get_coordinate() == coordinate
    for dim, name in enumerate(("dp", "tp")):
        line = np.moveaxis(grid, dim, -1)[tuple(c for d, c in enumerate(coordinate)
                                                if d != dim)]
        group = mesh.get_group(name)
        assert mesh.get_group(dim) is group
        assert dist.get_process_group_ranks(group) == line.tolist()
        assert mesh.size(name) == len(line) and mesh.get_local_rank(name) == coordinate[dim]
        value = np.array([float(rank + 1)])
        dist.all_reduce(value, group=group)
        assert value[0] == float((line + 1).sum())
        sub = mesh[name]
        assert sub.ndim == 1 and sub.get_group() is group and sub.mesh.tolist() == line.tolist()
    assert mesh[("dp", "tp")] is mesh


def test_one_dimension_over_the_world_is_the_default_group(rank, size):
    mesh = init_device_mesh("cpu", (size,))
    assert mesh.get_group() is dist.group.WORLD and mesh.get_local_rank() == rank


def test_bad_meshes_are_errors(rank, size):
    with pytest.raises(RuntimeError, match="product is the world size"):
        init_device_mesh("cpu", (size + 1,))
    with pytest.raises(RuntimeError, match="CPU only"):
        init_device_mesh("cuda", (size,))
    with pytest.raises(RuntimeError, match="one name per mesh dimension"):
        init_device_mesh("cpu", (size, 1), mesh_dim_names=("a",))
    mesh = init_device_mesh("cpu", (size, 1), mesh_dim_names=("a", "b"))
    with pytest.raises(KeyError, match="does not exist"):
        mesh["c"]
    with pytest.raises(RuntimeError, match="say which"):
        mesh.get_group()
    with pytest.raises(ValueError, match="appears twice"):
        DeviceMesh("cpu", [0, 0])
