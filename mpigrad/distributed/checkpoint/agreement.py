"""The ranks taking part in a save or load, and their agreement: a step that fails on one
rank raises the same error on every rank, so none is left waiting in the next collective.
Outside an initialised process group (or with `no_dist=True`) the world is this process."""
import os

from ..objects import all_gather_object
from ..process_group import is_initialized, member_group

# The error types a failed step keeps on every rank; anything else arrives as RuntimeError.
_KEPT_TYPES = {error.__name__: error for error in
               (ValueError, TypeError, RuntimeError, KeyError, OSError, FileNotFoundError)}


class Ranks:
    def __init__(self, process_group, no_dist, caller):
        if no_dist or (process_group is None and not is_initialized()):
            self.group, self.rank, self.size = None, 0, 1
        else:
            self.group = member_group(process_group, caller)
            if self.group is None:
                raise ValueError(f"{caller}(): this rank is not a member of process_group")
            self.rank, self.size = self.group.rank(), self.group.size()
        self.caller = caller

    def agree(self, step, share=False):
        """Run `step()` on every rank; its result here (with `share`, the list of every rank's
        result: keep them small), or, if it raised on any rank, that error (the lowest such
        rank's, named) raised on all."""
        try:
            outcome, error = step(), None
        except Exception as exc:  # handed to every rank, raised there as here
            outcome, error = None, exc
        report = None if error is None else (type(error).__name__, str(error))
        if self.group is None:
            reports, outcomes = [report], [outcome]
        else:
            gathered = [None] * self.size
            all_gather_object(gathered, (report, outcome if share else None), group=self.group)
            reports, outcomes = [r for r, _ in gathered], [o for _, o in gathered]
        for rank, failed in enumerate(reports):
            if failed is not None:
                name, message = failed
                where = "" if self.size == 1 else f"rank {rank}: "
                raise _KEPT_TYPES.get(name, RuntimeError)(
                    f"{self.caller}() failed on {where}{message}") from error
        return outcomes if share else outcome


def checkpoint_directory(checkpoint_id, storage, caller):
    """The directory from `checkpoint_id` or a FileSystemWriter/Reader, exactly one given."""
    if (checkpoint_id is None) == (storage is None):
        raise ValueError(f"{caller}(): give the checkpoint directory as checkpoint_id or as a "
                         f"storage {'writer' if caller == 'save' else 'reader'}, not "
                         f"{'neither' if checkpoint_id is None else 'both'}")
    path = storage.path if storage is not None else checkpoint_id
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{caller}(): checkpoint_id must be a directory path, got "
                        f"{type(path).__name__}")
    return os.fspath(path)
