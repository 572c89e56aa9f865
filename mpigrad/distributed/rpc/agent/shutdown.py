"""The workers that have left, and the graceful shutdown's agreement among those that stay.

Every worker repeats rounds of "wait until every request I sent has had its reply received
(even one that timed out: its function may still be running, and its late reply must not
outlive the communicator), then sum over workers how many requests each has ever sent",
serving requests all along, until two consecutive sums are equal: then no worker sent
anything between its two contributions, and every request sent before was answered. Only
then do the listeners stop. A worker that stops without that agreement
(shutdown(graceful=False), or exiting the interpreter) first tells every other worker, whose
calls to it then fail at once. The rounds' collective needs every worker, so once one has
left the others agree among themselves instead: each, its own calls answered, tells the
others it is done and serves until each of them has said the same, within the RPC timeout.
"""
import time

import numpy as np
from mpi4py import MPI

from .replies import RpcTimeoutError


class Shutdown:
    """The departures and shutdown agreement of `agent`, whose collectives run on
    `collective_comm`; `lock` is the agent's condition."""

    def __init__(self, agent, lock, collective_comm):
        self._agent = agent
        self._lock = lock
        self._comm = collective_comm
        self.dead = {}  # rank -> why it is gone
        self._done = set()  # ranks that finished shutting down among the survivors

    def peer_gone(self, rank, why):
        self.dead[rank] = why
        self._agent.replies.fail_calls_to(rank, why)

    def peer_done(self, rank):
        with self._lock:
            self._done.add(rank)
            self._lock.notify_all()

    def agree_all_done(self):
        """The graceful-shutdown rounds described in the module docstring; among the workers
        that are left if one has departed (the rounds' collective needs every worker).
        Returns the departed workers' descriptions (empty when none left)."""
        replies = self._agent.replies
        previous = None
        while True:
            replies.wait_until_idle()
            if self.dead:
                return self._agree_among_survivors()
            total = np.array(replies.requests_sent, np.int64)
            summed = np.zeros_like(total)
            request = self._comm.Iallreduce(total, summed, MPI.SUM)
            while not request.Test():
                if self.dead:
                    # A worker left mid-round: this collective can never complete. It is
                    # left pending on a communicator that is then never used again.
                    return self._agree_among_survivors()
                time.sleep(1e-3)  # the listener and pool keep serving meanwhile
            if previous is not None and summed == previous:
                return []
            previous = summed.copy()

    def _agree_among_survivors(self):
        """Each worker left tells the others it has no request of its own outstanding, then
        serves until each of them has said the same (or left too), within the agent's
        timeout: its own calls are all answered, and no one still needs it."""
        agent = self._agent
        agent.replies.wait_until_idle()
        others = [r for r in range(agent.size) if r != agent.rank and r not in self.dead]
        for rank in others:
            agent.post(rank, "done", None, "rpc.shutdown among the workers left")
        deadline = time.monotonic() + (agent.timeout or float("inf"))
        with self._lock:
            while not all(r in self._done or r in self.dead for r in others):
                if time.monotonic() > deadline:
                    waiting = [agent.describe(r) for r in others
                               if r not in self._done and r not in self.dead]
                    raise RpcTimeoutError(f"rpc.shutdown: {', '.join(waiting)} did not shut "
                                          f"down within {agent.timeout:g} s after a worker "
                                          f"left")
                self._lock.wait(0.01)
        agent.replies.wait_until_idle()
        return [f"{agent.describe(r)} ({why})" for r, why in sorted(self.dead.items())]
