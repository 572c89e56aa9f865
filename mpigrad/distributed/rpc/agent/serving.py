"""What the agent does with each message a receiving thread takes: a reply completes its call
(replies.py); a request goes to its handler. Cheap bookkeeping requests (RRef forks and
deletes, gradients for distributed autograd) run at once on the receiving thread, the others
on the listener itself (see listener.py) or on the pool of `num_worker_threads` threads when
another thread received them. So a nested call (A calls B, which calls A back) or a long
function never stops other requests. Messages may thus be handled in a different order than
they arrived; no protocol here depends on that order (each message is sent only after the
reply to the one it depends on).

Every reply being sent is counted until it has left: a worker that stops at once lets the
replies of functions that returned go before its "bye".
"""
import contextlib
import sys

from .. import functions, wire


class Handler:
    """How the agent serves one kind of request: `prepare(sender, payload)` runs on the
    receiving thread before the request goes to the pool (bookkeeping the sender may rely on
    once it has the reply) and returns what `run(sender, prepared)` gets; `run` returns the
    reply's value. `inline` handlers run entirely on the receiving thread and must be quick
    and never block."""

    def __init__(self, run, inline=False, prepare=None):
        self.run, self.inline, self.prepare = run, inline, prepare


class Server:
    """Serving `agent`'s incoming messages with `handlers` (kind -> Handler) and `pool`;
    `lock` is the agent's condition."""

    def __init__(self, agent, lock, handlers, pool):
        self._agent = agent
        self._lock = lock
        self.handlers = handlers
        self._pool = pool
        self.replying = 0  # replies due or being sent (every path): they leave before a "bye"

    def poll(self, status, run_here):
        """Take one message, if any: a message whose tensors have arrived, or else a new
        header. Returns (whether one was taken, with `run_here` a request for this thread to
        run once it is no longer receiving, else None)."""
        transport = self._agent.transport
        arrived = transport.arrived()
        if arrived is not None:
            source, parsed, error = arrived
            if error is not None:
                self._drop(source, error)
                return True, None
            return True, self._dispatch(source, parsed, run_here)
        incoming = transport.probe(status)
        if incoming is None:
            return False, None
        source, header = transport.receive_header(incoming, status)
        try:
            parsed = wire.parse(header)
            _, _, tag, _, _, _, buffers = parsed
            if buffers:
                transport.expect_arrays(source, tag, buffers, parsed)
                return True, None
        except Exception as exc:
            self._drop(source, exc)
            return True, None
        return True, self._dispatch(source, parsed, run_here)

    def _drop(self, source, why):
        # A malformed, forged or truncated message: dropped, whoever sent it; its msg_id
        # cannot be trusted enough to answer. The agent goes on serving.
        agent = self._agent
        sys.stderr.write(f"[{agent.info.name}] RPC: dropped a message from "
                         f"{agent.describe(source)}: {why}\n")

    def _dispatch(self, source, parsed, run_here):
        """Handle a message whose tensors are all in."""
        agent = self._agent
        kind, msg_id, _, autograd, body, arrays, _ = parsed
        if kind == "reply":
            agent.replies.complete(source, msg_id, autograd, body, arrays)
            return None
        handler = self.handlers[kind]
        try:
            payload = agent.codec.decode(source, autograd, body, arrays)
            if handler.prepare is not None:
                payload = handler.prepare(source, payload)
        except Exception as exc:
            if msg_id:
                self._reply_on_pool(self._reply, source, msg_id, False, wire.describe_error(exc),
                                    None)
            return None
        context = agent.codec.context_of(autograd)
        if handler.inline:
            try:
                result, ok = handler.run(source, payload), True
            except Exception as exc:
                result, ok = wire.describe_error(exc), False
            if msg_id:
                transport = agent.transport
                with self._replying_now():
                    transport.isend(source,
                                    transport.encode(source, "reply", msg_id, (ok, result))[0])
        elif run_here:
            return lambda: self._serve(source, msg_id, handler, payload, context)
        else:
            self._pool.submit(self._serve, source, msg_id, handler, payload, context)
        return None

    def _serve(self, source, msg_id, handler, payload, context):
        with self._agent.codec.running_in(context):
            try:
                result, ok = handler.run(source, payload), True
            except BaseException as exc:  # every failure goes back to the caller
                result, ok = wire.describe_error(exc), False
            del payload
            if isinstance(result, functions.Deferred):
                # An async function: reply when its Future completes, from a pool thread
                # (never from the thread completing it, which may be the listener), and let
                # this thread go now.
                result.future.add_done_callback(
                    lambda done: self._reply_on_pool(self._reply_when_done, source, msg_id,
                                                     done, context))
            elif msg_id:
                self._reply(source, msg_id, ok, result, context)

    def _reply_when_done(self, source, msg_id, future, context):
        try:
            result, ok = future.wait(), True
        except BaseException as exc:
            result, ok = wire.describe_error(exc), False
        if msg_id:
            self._reply(source, msg_id, ok, result, context)

    def _reply(self, dest, msg_id, ok, result, context):
        agent = self._agent
        if dest in agent.shutdown.dead:
            return
        transport = agent.transport
        with self._replying_now(), agent.codec.running_in(context):
            try:
                header, arrays, tag = transport.encode(dest, "reply", msg_id, (ok, result))
            except Exception as exc:
                header, arrays, tag = transport.encode(dest, "reply", msg_id,
                                                       (False, wire.describe_error(exc)))
            transport.send(dest, header, arrays, tag)

    @contextlib.contextmanager
    def _replying_now(self):
        """Count a reply as being sent for the block: a worker leaving at once lets it go
        before its "bye" (see Agent.stop)."""
        with self._lock:
            self.replying += 1
        try:
            yield
        finally:
            self._replied()

    def _replied(self):
        with self._lock:
            self.replying -= 1
            self._lock.notify_all()

    def _reply_on_pool(self, reply, *args):
        """`reply(*args)` on the pool, counted as being sent from now on, not only once a
        pool thread starts it."""
        with self._lock:
            self.replying += 1

        def run():
            try:
                reply(*args)
            finally:
                self._replied()
        try:
            self._pool.submit(run)
        except RuntimeError:  # the pool has shut down: this worker is leaving at once
            self._replied()
