"""Runs several programs of this folder, one after another, in this one interpreter, each as
`__main__` with its own sys.argv, as `python program.py ARGS` would: one process per library
instead of one per program (an interpreter importing torch takes seconds).

    python _run_programs.py JOBS.json            # on torch
    python -m mpigrad.compat _run_programs.py JOBS.json   # on mpigrad, through the alias

JOBS.json is a list of {"name", "script", "argv", "cwd"}. A program runs in its cwd and its
standard output goes to <cwd>/<name>.out; one that raises leaves its traceback in
<cwd>/<name>.err, and the next program still runs."""
import contextlib
import json
import os
import runpy
import sys
import traceback

import torch


def run(job):
    os.makedirs(job["cwd"], exist_ok=True)
    os.chdir(job["cwd"])
    sys.argv = [job["script"]] + job["argv"]
    with open(f"{job['name']}.out", "w") as out, contextlib.redirect_stdout(out):
        try:
            runpy.run_path(job["script"], run_name="__main__")
        except BaseException:  # SystemExit from argparse too: the test shows it
            with open(f"{job['name']}.err", "w") as err:
                err.write(traceback.format_exc())
        finally:
            # What a program may set for itself, and the next would inherit in one process.
            torch.set_default_dtype(torch.float32)


def main():
    with open(sys.argv[1]) as jobs:
        for job in json.load(jobs):
            run(job)


if __name__ == "__main__":
    main()
