"""DeviceMesh: the ranks laid out as an n-dimensional array, with a process group per dimension.

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("replicate", "shard"))
    mesh["shard"].get_group()      # the 4 ranks that share this rank's "replicate" coordinate
    mesh.get_local_rank("shard")   # this rank's coordinate along "shard"

Rank r of the default group sits at the position of r in `arange(world).reshape(shape)`
(row-major, as torch lays it out), so the last dimension holds consecutive ranks: those most
likely to share a host. For each dimension every rank takes part in building one group per
line of the mesh along it (new_group is collective over the default group) and keeps the one
it belongs to; a line that covers the whole world is the default group itself. Indexing by
name gives a sub-mesh over this rank's slice that shares those groups.

Only "cpu" exists here (mpigrad has no other device); torch's other device types are a
RuntimeError.
"""
import numpy as np

from .process_group import _get_default_group, get_rank, new_group

__all__ = ["DeviceMesh", "init_device_mesh"]


class DeviceMesh:
    """Ranks arranged as `mesh` (an int64 array of global ranks), one process group per
    dimension. Build it with `init_device_mesh`, or `DeviceMesh("cpu", ranks_array)`
    (collective: every rank of the default group calls it with the same array)."""

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _groups=None):
        _check_device(device_type)
        world = _get_default_group("DeviceMesh")
        ranks = np.asarray(mesh._array if hasattr(mesh, "_array") else mesh, dtype=np.int64)
        if ranks.ndim == 0:
            raise ValueError("DeviceMesh needs at least one dimension, got a 0-d mesh")
        if sorted(ranks.reshape(-1).tolist()) != sorted(set(ranks.reshape(-1).tolist())):
            raise ValueError(f"DeviceMesh: a rank appears twice in the mesh {ranks.tolist()}")
        if ranks.min() < 0 or ranks.max() >= world.size():
            raise ValueError(f"DeviceMesh: ranks must lie in [0, {world.size()}), got "
                             f"{ranks.tolist()}")
        names = _check_names(mesh_dim_names, ranks.ndim)
        self.device_type = "cpu"
        self.mesh = ranks
        self.mesh_dim_names = names
        self._rank = get_rank()
        where = np.argwhere(ranks == self._rank)
        self._coordinate = tuple(int(c) for c in where[0]) if len(where) else None
        self._groups = _groups if _groups is not None else [
            _group_along(ranks, dim, self._coordinate, world) for dim in range(ranks.ndim)]

    # ------------------------------------------------------------------ shape
    @property
    def ndim(self):
        return self.mesh.ndim

    @property
    def shape(self):
        return tuple(self.mesh.shape)

    def size(self, mesh_dim=None):
        """The number of ranks in the mesh, or along `mesh_dim` (an index or a name)."""
        return int(self.mesh.size) if mesh_dim is None else \
            int(self.mesh.shape[self._dim(mesh_dim)])

    def get_rank(self):
        """This process's global rank."""
        return self._rank

    def get_coordinate(self):
        """This rank's position in the mesh, or None if it is not in it."""
        return list(self._coordinate) if self._coordinate is not None else None

    def get_local_rank(self, mesh_dim=None):
        """This rank's coordinate along `mesh_dim` (may be omitted for a 1-d mesh), which is
        also its rank in that dimension's group."""
        return self._coordinate[self._dim(mesh_dim, "get_local_rank")]

    # ------------------------------------------------------------------ groups
    def get_group(self, mesh_dim=None):
        """The process group of this rank's line along `mesh_dim` (an index or a name; may be
        omitted for a 1-d mesh)."""
        return self._groups[self._dim(mesh_dim, "get_group")]

    def get_all_groups(self):
        return list(self._groups)

    def __getitem__(self, names):
        """The sub-mesh over the named dimensions (a name or a tuple of names, in the mesh's
        order) through this rank's position: its groups are this mesh's."""
        if self.mesh_dim_names is None:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names")
        wanted = (names,) if isinstance(names, str) else tuple(names)
        dims = [self._dim(name) for name in wanted]
        if dims != sorted(dims) or len(set(dims)) != len(dims):
            raise KeyError(f"Invalid mesh_dim_names {wanted} specified: give each at most once, "
                           f"in the mesh's order {self.mesh_dim_names}")
        if dims == list(range(self.ndim)):
            return self
        index = tuple(slice(None) if d in dims else self._coordinate[d] for d in range(self.ndim))
        sub = object.__new__(DeviceMesh)
        sub.device_type = self.device_type
        sub.mesh = self.mesh[index]
        sub.mesh_dim_names = wanted
        sub._rank = self._rank
        sub._coordinate = tuple(self._coordinate[d] for d in dims)
        sub._groups = [self._groups[d] for d in dims]
        return sub

    def _dim(self, mesh_dim, caller=None):
        if mesh_dim is None:
            if self.ndim != 1:
                raise RuntimeError(f"{caller or 'this call'}(): the mesh has {self.ndim} "
                                   f"dimensions ({self.mesh_dim_names or self.shape}); say which")
            return 0
        if isinstance(mesh_dim, str):
            if self.mesh_dim_names is None or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh "
                               f"dimensions are: mesh_dim_names={self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"mesh_dim {mesh_dim} out of range for a {self.ndim}-d mesh")
        return mesh_dim % self.ndim

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('cpu', {self.mesh.tolist()}{names})"


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A DeviceMesh of shape `mesh_shape` over every rank of the default group, rank r at the
    position of r in row-major order (collective: every rank calls it alike)."""
    _check_device(device_type)
    shape = tuple(int(n) for n in mesh_shape)
    world = _get_default_group("init_device_mesh").size()
    if not shape or any(n < 1 for n in shape) or int(np.prod(shape)) != world:
        raise RuntimeError(f"init_device_mesh: mesh_shape {tuple(mesh_shape)} must be positive "
                           f"sizes whose product is the world size {world}")
    return DeviceMesh("cpu", np.arange(world).reshape(shape), mesh_dim_names=mesh_dim_names)


def _check_device(device_type):
    if str(device_type) != "cpu":
        raise RuntimeError(f"DeviceMesh: device_type {device_type!r} is not available; mpigrad "
                           f"runs on the CPU only, use 'cpu'")


def _check_names(names, ndim):
    if names is None:
        return None
    names = tuple(names)
    if len(names) != ndim:
        raise RuntimeError(f"mesh_dim_names {names} must have one name per mesh dimension "
                           f"({ndim})")
    if len(set(names)) != len(names):
        raise RuntimeError(f"mesh_dim_names {names} must be unique")
    return names


def _group_along(ranks, dim, coordinate, world):
    """This rank's group along `dim`: every line of the mesh along it becomes a group (every
    rank calls new_group for each, in the same order); lines covering the world reuse it."""
    lines = np.moveaxis(ranks, dim, -1).reshape(-1, ranks.shape[dim])
    mine = None
    for line in lines:
        members = sorted(line.tolist())
        if members == list(range(world.size())):
            group = world
        else:
            group = new_group(members)
        if coordinate is not None and world.rank() in members:
            mine = group
    return mine
