"""Differentiable collectives: forward runs the collective, backward runs its adjoint.

Convention. What gets differentiated is the sum of every rank's loss, L = sum_r L_r, and
backward gives each rank dL/d(its own inputs). With parameter gradients then averaged over
ranks (as DistributedDataParallel does), the result is the gradient of the mean of the
ranks' losses. So a loss that mixes samples across ranks, such as a contrastive loss over
`all_gather`ed embeddings where each rank takes the mean over its own queries, gets the
true gradient of the loss over the whole batch, with no rescaling by the world size.

What that means for each function (N = group size; "the gradients" of an output are those
the N ranks hold for their copies of it):

- `all_gather(t)` returns N tensors, one per rank. Backward: rank r receives the sum over
  ranks of the gradients of output r (a reduce-scatter).
- `all_reduce(t, op)` returns a new tensor. Backward: SUM gives every rank the sum of the
  gradients, AVG their mean; MAX/MIN give that sum to the ranks holding the extreme value,
  split evenly between ties; PRODUCT gives it times the product of the other ranks' inputs.
- `broadcast(t, src)` returns `src`'s tensor on every rank. Backward: `src` receives the sum
  of the gradients; the other ranks' inputs get zero (their values were not used).
- `reduce(t, dst, op)` (SUM or AVG): `dst` gets the reduction; elsewhere, as with MPI, the
  result is a copy of the input whose gradient is ignored. Backward: every rank's input
  receives `dst`'s gradient (divided by N for AVG).
- `reduce_scatter(output, input_list, op)` (SUM or AVG) fills and returns `output`.
  Backward: `input_list[i]` receives the gradient of rank i's output (divided by N for AVG).
- `all_to_all(output_tensor_list, input_tensor_list)` fills and returns the outputs.
  Backward: `input_tensor_list[i]` receives the gradient of what rank i received from us.
- `send(t, dst)` returns a zero scalar "token" tied to `t`; `recv(t, src)` returns the
  received tensor. Backward of the receiver's result sends its gradient back to the sender,
  where the token's backward receives it as the gradient of `t`. So the sender must include
  the token in what it calls backward on: `(loss + token).backward()`, or `token.backward()`.
  No gradient travels if the sent tensor did not require grad.

Backward passes are built from these same functions, so double backward works for the linear
ones; MAX/MIN/PRODUCT treat the selection and the other ranks' factors as constants there.
Every rank of the group must take part in forward and in backward, in the same order.
"""
import numpy as np
from mpi4py import MPI

from ... import autograd
from ...creation import from_numpy, zeros, zeros_like
from ...tensor import Tensor
from .. import collectives, p2p
from ..buffers import message
from ..process_group import GroupMember, get_rank, get_world_size, group_rank_of, member_group
from ..reduce_ops import ReduceOp
from ..fault.watchdog import blocked

_ALL_REDUCE_OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)
_LINEAR_OPS = (ReduceOp.SUM, ReduceOp.AVG)


def all_gather(tensor, group=None):
    """One tensor per rank of the group: rank i's `tensor`. See the module docstring for the
    gradient."""
    _group(group, "all_gather")
    _expect_tensors("all_gather", tensor)
    return _AllGather.apply(group, tensor)


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    """A new tensor holding the reduction of every rank's `tensor` with `op`."""
    _group(group, "all_reduce")
    _expect_tensors("all_reduce", tensor)
    _expect_op(op, _ALL_REDUCE_OPS, "all_reduce")
    return _AllReduce.apply(group, op, tensor)


def broadcast(tensor, src, group=None):
    """A new tensor holding `src`'s `tensor`, on every rank."""
    _group(group, "broadcast")
    _expect_tensors("broadcast", tensor)
    return _Broadcast.apply(group, src, tensor)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None):
    """A new tensor: the reduction of every rank's `tensor` on `dst`, a copy of `tensor`
    elsewhere."""
    _group(group, "reduce")
    _expect_tensors("reduce", tensor)
    _expect_op(op, _LINEAR_OPS, "reduce")
    return _Reduce.apply(group, dst, op, tensor)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None):
    """Fill `output` with the reduction over ranks of `input_list[this rank]`, and return it."""
    _group(group, "reduce_scatter")
    _expect_tensors("reduce_scatter", output, *input_list)
    _expect_op(op, _LINEAR_OPS, "reduce_scatter")
    return _ReduceScatter.apply(group, op, output, *input_list)


def all_to_all(output_tensor_list, input_tensor_list, group=None):
    """Send `input_tensor_list[i]` to rank i, receive rank i's into `output_tensor_list[i]`;
    returns the outputs as a tuple."""
    pg = _group(group, "all_to_all")
    if len(output_tensor_list) != pg.size() or len(input_tensor_list) != pg.size():
        raise ValueError(f"all_to_all needs {pg.size()} output and {pg.size()} input tensors "
                         f"(one per rank), got {len(output_tensor_list)} and "
                         f"{len(input_tensor_list)}")
    _expect_tensors("all_to_all", *output_tensor_list, *input_tensor_list)
    return _AllToAll.apply(group, *output_tensor_list, *input_tensor_list)


def send(tensor, dst, group=None, tag=0):
    """Send `tensor` to `dst` and return the token through which its gradient comes back."""
    pg = _group(group, "send")
    _expect_tensors("send", tensor)
    _check_tag(pg, tag)
    _, peer = p2p.prepare(pg, np.ascontiguousarray(tensor._array), dst, "dst", tag, blocking=True)
    # Tell the receiver first whether to send a gradient back, so neither side waits in vain.
    wants_grad = np.array([autograd.is_grad_enabled() and tensor.requires_grad], np.uint8)
    with blocked(pg, f"differentiable send to rank {dst} (tag {tag})", collective=False,
                 peers=(dst,)):
        pg._autograd_comm.Send(message(wants_grad), peer, 2 * tag)
    return _Send.apply(group, dst, tag, tensor)


def recv(tensor, src=None, group=None, tag=0):
    """Receive a tensor of `tensor`'s shape and dtype (its values are not used) from `src`
    (any rank when None); returns it as a new tensor, which requires grad if the sender's did.
    With grad mode off here, a zero gradient goes back at once so the sender does not wait."""
    pg = _group(group, "recv")
    _expect_tensors("recv", tensor)
    _check_tag(pg, tag)
    received, peer = p2p.prepare(pg, np.empty(tensor.shape, tensor.dtype), src, "src", tag,
                                 blocking=True)
    wants_grad = np.zeros(1, np.uint8)
    sender = p2p.receive_exact(pg, pg._autograd_comm, wants_grad, peer, 2 * tag)
    p2p.recv(received, src=sender, group=group, tag=tag)
    result = from_numpy(received)
    if not wants_grad[0]:
        return result
    if not autograd.is_grad_enabled():
        _send_gradient(pg, np.zeros_like(received), sender, tag)
        return result
    anchor = zeros((), requires_grad=True)  # makes the result part of the graph
    return _Recv.apply(group, sender, tag, anchor, result)


class _AllGather(autograd.Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        gathered = np.empty((get_world_size(group),) + tensor.shape, tensor.dtype)
        collectives.all_gather_into_tensor(gathered, np.ascontiguousarray(tensor._array), group)
        return tuple(from_numpy(part) for part in gathered)

    @staticmethod
    def backward(ctx, *grads):
        output = zeros_like(grads[0])
        return None, _ReduceScatter.apply(ctx.group, ReduceOp.SUM, output, *grads)


class _ReduceScatter(autograd.Function):
    @staticmethod
    def forward(ctx, group, op, output, *inputs):
        ctx.group, ctx.op = group, op
        collectives.reduce_scatter(output, [np.ascontiguousarray(t._array) for t in inputs], op,
                                   group)
        return output

    @staticmethod
    def backward(ctx, grad):
        grads = _AllGather.apply(ctx.group, grad)
        if ctx.op is ReduceOp.AVG:
            grads = tuple(g / len(grads) for g in grads)
        return (None, None, None, *grads)


class _AllReduce(autograd.Function):
    @staticmethod
    def forward(ctx, group, op, tensor):
        ctx.group, ctx.op = group, op
        result = np.array(tensor._array, order="C")
        collectives.all_reduce(result, op, group)
        if op not in _LINEAR_OPS:
            ctx.save_for_backward(tensor)
            ctx.result = result.copy()
        return from_numpy(result)

    @staticmethod
    def backward(ctx, grad):
        if ctx.op in _LINEAR_OPS:
            return None, None, _AllReduce.apply(ctx.group, ctx.op, grad)
        total = _AllReduce.apply(ctx.group, ReduceOp.SUM, grad)
        inputs = ctx.saved_tensors[0]._array
        if ctx.op is ReduceOp.PRODUCT:
            everyone = np.empty((get_world_size(ctx.group),) + inputs.shape, inputs.dtype)
            collectives.all_gather_into_tensor(everyone, np.ascontiguousarray(inputs), ctx.group)
            factor = np.delete(everyone, get_rank(ctx.group), axis=0).prod(axis=0)
        else:
            holds_extreme = (inputs == ctx.result).astype(inputs.dtype)
            ties = holds_extreme.copy()
            collectives.all_reduce(ties, ReduceOp.SUM, ctx.group)
            factor = holds_extreme / ties
        return None, None, total * from_numpy(factor)


class _Broadcast(autograd.Function):
    @staticmethod
    def forward(ctx, group, src, tensor):
        ctx.group, ctx.src = group, src
        result = np.array(tensor._array, order="C")
        collectives.broadcast(result, src, group)
        return from_numpy(result)

    @staticmethod
    def backward(ctx, grad):
        total = _Reduce.apply(ctx.group, ctx.src, ReduceOp.SUM, grad)
        return None, None, total if get_rank() == ctx.src else zeros_like(grad)


class _Reduce(autograd.Function):
    @staticmethod
    def forward(ctx, group, dst, op, tensor):
        ctx.group, ctx.dst, ctx.op = group, dst, op
        result = np.array(tensor._array, order="C")
        collectives.reduce(result, dst, op, group)
        return from_numpy(result)

    @staticmethod
    def backward(ctx, grad):
        spread = _Broadcast.apply(ctx.group, ctx.dst, grad)
        if ctx.op is ReduceOp.AVG:
            spread = spread / get_world_size(ctx.group)
        return None, None, None, spread


class _AllToAll(autograd.Function):
    @staticmethod
    def forward(ctx, group, *tensors):
        half = len(tensors) // 2
        outputs, inputs = tensors[:half], tensors[half:]
        ctx.group, ctx.input_layouts = group, [(t.shape, t.dtype) for t in inputs]
        collectives.all_to_all(list(outputs), [np.ascontiguousarray(t._array) for t in inputs],
                               group)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        returned = [zeros(shape, dtype=dtype) for shape, dtype in ctx.input_layouts]
        grad_inputs = _AllToAll.apply(ctx.group, *returned, *grads)
        return (None, *[None] * len(grads), *grad_inputs)


class _Send(autograd.Function):
    @staticmethod
    def forward(ctx, group, dst, tag, tensor):
        ctx.group, ctx.dst, ctx.tag = group, dst, tag
        ctx.layout = (tensor.shape, tensor.dtype)
        p2p.send(np.ascontiguousarray(tensor._array), dst, group, tag)
        return zeros((), dtype=tensor.dtype)

    @staticmethod
    def backward(ctx, token_grad):
        pg = member_group(ctx.group, "send")
        grad = np.empty(*ctx.layout)
        p2p.receive_exact(pg, pg._autograd_comm, grad, group_rank_of(pg, ctx.dst, "dst"),
                          2 * ctx.tag + 1)
        return None, None, None, from_numpy(grad)


class _Recv(autograd.Function):
    @staticmethod
    def forward(ctx, group, sender, tag, anchor, received):
        ctx.group, ctx.sender, ctx.tag = group, sender, tag
        return received

    @staticmethod
    def backward(ctx, grad):
        pg = member_group(ctx.group, "recv")
        _send_gradient(pg, np.ascontiguousarray(grad._array), ctx.sender, ctx.tag)
        return None, None, None, None, None


def _send_gradient(pg, grad, sender, tag):
    with blocked(pg, f"sending the gradient of a recv back to rank {sender} (tag {tag})",
                 collective=False, peers=(sender,)):
        pg._autograd_comm.Send(message(grad), group_rank_of(pg, sender, "src"), 2 * tag + 1)


def _group(group, caller):
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError(f"mpigrad.distributed.nn.{caller}: global rank {get_rank()} is not a "
                         f"member of the group passed")
    return member_group(group, caller)


def _expect_tensors(caller, *tensors):
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"mpigrad.distributed.nn.{caller} takes mpigrad Tensors, got "
                            f"{type(t).__name__} (the collectives in mpigrad.distributed also "
                            f"take numpy arrays, but are not differentiable)")


def _expect_op(op, allowed, caller):
    if op not in allowed:
        names = ", ".join(f"ReduceOp.{o.name}" for o in allowed)
        raise ValueError(f"mpigrad.distributed.nn.{caller} is differentiable for {names}; "
                         f"got {op!r}")


def _check_tag(pg, tag):
    # Each message's own tag t carries the data; 2t and 2t+1 on the group's autograd
    # communicator carry the "gradient wanted" flag and the gradient.
    limit = (pg.comm.Get_attr(MPI.TAG_UB) - 1) // 2
    if not isinstance(tag, int) or not 0 <= tag <= limit:
        raise ValueError(f"tag must be an int in [0, {limit}] for differentiable send/recv, "
                         f"got {tag!r}")
