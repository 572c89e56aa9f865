"""Ports for the launch tests' jobs, whose rank 0 binds the port it is told."""
import random
import socket


def free_port():
    """Two consecutive free ports, torchrun's store takes one, mpigrad's server the next, below
    the range from which the kernel hands out ports (to a bind to port 0 and to each outgoing
    connection, which other tests' jobs make by the hundred): there, nobody takes them between
    this look and rank 0's server binding them. A taken port fails rank 0 at once, but leaves
    the other ranks, which cannot tell it from a slow rank 0, waiting out their timeout."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        kernels_lowest = int(ports.read().split()[0])
    while True:
        port = random.randrange(kernels_lowest // 2, kernels_lowest - 1)
        with socket.socket() as probe, socket.socket() as second:
            try:
                probe.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
