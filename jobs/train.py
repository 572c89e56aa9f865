"""Data-parallel training of an MLP, a small CNN or a small ResNet with mpigrad.

    mpiexec -n 2 python jobs/train.py                      # synthetic images, MLP
    mpiexec -n 2 python jobs/train.py --model cnn --epochs 2
    mpiexec -n 2 python jobs/train.py --model resnet --train-samples 1000 --epochs 2
    mpiexec -n 4 python jobs/train.py --dataset mnist --data-dir ~/data/mnist
    srun --mpi=pmi2 python jobs/train.py --checkpoint runs/ckpt --resume

Every rank trains on its shard of each epoch (DistributedSampler) and DistributedDataParallel
averages gradients during backward. Rank 0 prints progress, writes metrics and checkpoints.
On SIGUSR1 or SIGTERM all ranks stop at the next step, rank 0 saves a checkpoint of the exact
position, and the job exits with code 99 (requeue me); `--resume` continues from it.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mpigrad as mg  # noqa: E402
import mpigrad.distributed as dist  # noqa: E402
import mpigrad.nn.functional as F  # noqa: E402
from mpigrad import data, nn, optim  # noqa: E402
from mpigrad.nn.parallel import DistributedDataParallel  # noqa: E402

from common import (PREEMPTED_EXIT_CODE, StopFlag, check_checkpoint_directory, log,  # noqa: E402
                    positive_float, positive_int)

def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Data-parallel training with mpigrad "
                                            "(launch with mpiexec or srun).")
    p.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp",
                   help="mlp: two hidden layers of 256; cnn: two conv+pool blocks; resnet: "
                        "two torchvision-style BasicBlocks of 16 and 32 channels (default mlp)")
    p.add_argument("--sync-bn", action="store_true",
                   help="BatchNorm statistics over the whole global batch (SyncBatchNorm), as "
                        "one process would compute them, instead of each rank's own slice")
    p.add_argument("--dataset", choices=["synthetic", "mnist", "digits"], default="synthetic",
                   help="synthetic: built-in 16x16 images, no download; mnist: IDX files in "
                        "--data-dir; digits: scikit-learn's bundled 8x8 digits (default synthetic)")
    p.add_argument("--data-dir", default=None, help="directory with the MNIST IDX files "
                   "(train-images-idx3-ubyte[.gz] and the others)")
    p.add_argument("--train-samples", type=positive_int, default=12000,
                   help="size of the synthetic training set (default 12000)")
    p.add_argument("--epochs", type=positive_int, default=3, help="epochs (default 3)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="batch size per rank (default 64)")
    p.add_argument("--lr", type=positive_float, default=0.05, help="learning rate (default 0.05)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights, data and order")
    p.add_argument("--checkpoint", metavar="DIR", default=None,
                   help="write DIR/ckpt-epochNNNN.npz after every epoch and DIR/final.npz at "
                        "the end")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --checkpoint DIR, if any")
    p.add_argument("--metrics", metavar="FILE", default=None,
                   help="append one JSON line of metrics per epoch to FILE (rank 0)")
    p.add_argument("--timeline", metavar="FILE", default=None,
                   help="write DistributedDataParallel's Chrome-trace timeline to FILE "
                        "(one file per rank)")
    args = p.parse_args(argv)
    if args.dataset == "mnist" and not args.data_dir:
        p.error("--dataset mnist needs --data-dir")
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint DIR")
    return args


def load_datasets(args):
    if args.dataset == "mnist":
        return data.MNIST(args.data_dir, train=True), data.MNIST(args.data_dir, train=False)
    if args.dataset == "digits":
        return data.load_digits(train=True, seed=args.seed), data.load_digits(train=False,
                                                                             seed=args.seed)
    return (data.SyntheticImages(args.train_samples, seed=args.seed, train=True),
            data.SyntheticImages(2000, seed=args.seed, train=False))


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 conv+BatchNorm layers and a shortcut, which is
    a strided 1x1 conv+BatchNorm when the block changes resolution or width."""

    def __init__(self, in_channels, channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


def resnet(in_channels, num_classes):
    """A small torchvision-style ResNet: a 3x3 stem, a 16- and a strided 32-channel block,
    global average pooling and a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        BasicBlock(16, 16), BasicBlock(16, 32, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def build_model(kind, image_shape, num_classes):
    channels, height, width = image_shape
    if kind == "resnet":
        return resnet(channels, num_classes)
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 256), nn.ReLU(),
                             nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, num_classes))
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (height // 4) * (width // 4), num_classes))


def checkpoint_position(state, world, batch_size):
    """(epoch, samples of that epoch's order already trained on) of a checkpoint. Older
    checkpoints recorded only [epoch, step]; their step is counted at the present world
    size and batch size, the only ones they could be resumed with."""
    position = state["position"]
    if isinstance(position, dict):
        return int(position["epoch"]), int(position["samples"])
    epoch, step = (int(v) for v in position)
    return epoch, step * world * batch_size


def newest_checkpoint(directory, world, batch_size, rank):
    """The readable checkpoint furthest along in training (epoch, then samples within it);
    a damaged one is skipped, saying so, for the one before it."""
    best, best_position = None, None
    for path in glob.glob(os.path.join(directory, "ckpt-*.npz")):
        try:
            state = mg.load(path)
        except ValueError as err:
            log(rank, f"warning: skipping a damaged checkpoint: {err}")
            continue
        position = checkpoint_position(state, world, batch_size)
        if best_position is None or position > best_position:
            best, best_position = path, position
    return best


def save_checkpoint(path, model, optimizer, epoch, samples, world, batch_size):
    """`samples`: how many of the epoch's order (all ranks together) are done; with the
    world size and batch size that produced them, so a resume at another size can tell."""
    mg.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "position": {"epoch": epoch, "samples": samples, "world_size": world,
                          "batch_size": batch_size},
             "rng": mg.get_rng_state()}, path)


def remaining_share(sampler, done):
    """This rank's indices for the rest of the epoch after the first `done` samples of the
    epoch's order, whatever world size trained those.

    DistributedSampler deals the epoch's order out round-robin, so the samples all ranks
    have trained on after a number of full steps are a prefix of that order. The rest is
    dealt the same way, padded from the start of the order: at an unchanged world size
    each rank continues exactly the shard it had.
    """
    whole = data.DistributedSampler(sampler.dataset, 1, 0, shuffle=sampler.shuffle,
                                    seed=sampler.seed)
    whole.set_epoch(sampler.epoch)
    order = list(whole)
    rest = order[done:]
    rest += order[:-len(rest) % sampler.num_replicas]
    return rest[sampler.rank::sampler.num_replicas]


def evaluate(model, dataset, rank, world):
    """Accuracy on the whole dataset, each rank scoring its own shard."""
    model.eval()
    correct = np.zeros(2, np.int64)
    loader = data.DataLoader(dataset, batch_size=512,
                             sampler=data.DistributedSampler(dataset, world, rank, shuffle=False,
                                                             drop_last=True))
    with mg.no_grad():
        for x, y in loader:
            correct += [int((model(x).argmax(1) == y).sum().item()), len(y)]
    model.train()
    dist.all_reduce(correct)
    return correct[0] / max(correct[1], 1)


def train(args):
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    train_set, test_set = load_datasets(args)
    image, _ = train_set[0]
    num_classes = int(train_set.tensors[1].numpy().max()) + 1
    mg.manual_seed(args.seed)
    model = build_model(args.model, tuple(image.shape), num_classes)
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    start_epoch, start_samples = 0, 0
    if args.checkpoint:
        problem = check_checkpoint_directory(args.checkpoint, rank)
        if problem:
            log(rank, f"error: {problem}")
            return 1
    if args.resume:
        path = newest_checkpoint(args.checkpoint, world, args.batch_size, rank)
        if path:
            state = mg.load(path)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            mg.set_rng_state(state["rng"])
            start_epoch, start_samples = checkpoint_position(state, world, args.batch_size)
            written_by = state["position"]
            written_by = (f"{written_by['world_size']} ranks x batch {written_by['batch_size']}"
                          if isinstance(written_by, dict) else "an older train.py")
            log(rank, f"resuming from {path} at epoch {start_epoch + 1}, sample "
                      f"{start_samples} of {len(train_set)} (written by {written_by}; now "
                      f"{world} ranks x batch {args.batch_size})")
    ddp = DistributedDataParallel(model, timeline=args.timeline)
    sampler = data.DistributedSampler(train_set, seed=args.seed)
    loader = data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    stop = StopFlag()
    log(rank, f"{args.model} on {args.dataset}: {len(train_set)} training samples, "
              f"{world} ranks x batch {args.batch_size}, {args.epochs} epochs")

    test_accuracy = 0.0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        done = start_samples if epoch == start_epoch else 0
        batches = loader if not done else data.DataLoader(
            train_set, batch_size=args.batch_size, sampler=remaining_share(sampler, done))
        progress = None
        if rank == 0:
            from tqdm import tqdm
            progress = tqdm(total=len(loader), initial=len(loader) - len(batches),
                            desc=f"epoch {epoch + 1}", disable=None, file=sys.stderr,
                            leave=False)
        totals = np.zeros(3)  # loss sum, correct, samples
        started = time.perf_counter()
        for x, y in batches:
            if stop.agreed():
                if rank == 0 and args.checkpoint:
                    save_checkpoint(os.path.join(args.checkpoint, "ckpt-preempt.npz"), model,
                                    optimizer, epoch, done, world, args.batch_size)
                dist.barrier()
                log(rank, f"stopped by signal at epoch {epoch + 1} sample {done}; checkpoint "
                          f"{'saved' if args.checkpoint else 'not saved (no --checkpoint)'}")
                return PREEMPTED_EXIT_CODE
            done += world * args.batch_size
            optimizer.zero_grad()
            logits = ddp(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            totals += [loss.item() * len(y), int((logits.argmax(1) == y).sum().item()), len(y)]
            if progress is not None:
                progress.update(1)
        elapsed = time.perf_counter() - started
        if progress is not None:
            progress.close()
        dist.all_reduce(totals)
        test_accuracy = evaluate(model, test_set, rank, world)
        metrics = {"epoch": epoch + 1, "loss": totals[0] / max(totals[2], 1),
                   "accuracy": totals[1] / max(totals[2], 1), "test_accuracy": test_accuracy,
                   "samples": int(totals[2]), "samples_per_sec": totals[2] / elapsed}
        log(rank, f"epoch {epoch + 1}/{args.epochs} loss {metrics['loss']:.4f} "
                  f"acc {metrics['accuracy']:.4f} test_acc {test_accuracy:.4f} "
                  f"samples/s {metrics['samples_per_sec']:.0f}")
        if rank == 0:
            if args.metrics:
                with open(args.metrics, "a") as f:
                    f.write(json.dumps(metrics) + "\n")
            if args.checkpoint:
                save_checkpoint(os.path.join(args.checkpoint, f"ckpt-epoch{epoch + 1:04d}.npz"),
                                model, optimizer, epoch + 1, 0, world, args.batch_size)
    if rank == 0 and args.checkpoint:
        mg.save(model.state_dict(), os.path.join(args.checkpoint, "final.npz"))
    if ddp.timeline is not None:
        ddp.timeline.flush()
    dist.barrier()
    log(rank, f"training finished: epochs={args.epochs} test_accuracy={test_accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
