"""Programs written as PyTorch users write them (tests/programs/*.py, each one script against
`import torch`), run on torch and, unchanged, on mpigrad through `python -m mpigrad.compat`:
each must print what torch prints. The text of every line must be equal; the numbers printed
in exponent form (the losses) must agree to the program's tolerance: 1e-10 in float64,
torch's float32 tolerance in float32.

Every program's initial weights are torch's own init, saved by the torch run (the programs
write their --init file when it is missing) and loaded by the mpigrad run; data and noise
come from numpy seeds. All programs of a library run in one interpreter (_run_programs.py)."""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.distributed._environment import job_environment

HERE = pathlib.Path(__file__).resolve().parent
FLOAT64 = dict(rtol=1e-10, atol=1e-12)
FLOAT32 = dict(rtol=1.3e-6, atol=1e-5)  # torch.testing.assert_close's float32 default
# Autocast's losses are float32 sums over bf16/fp16 activations that differ from torch's in
# the last bit where torch's kernels round in another order; these bound that drift at a
# tenth of what one training step moves the loss, so a wrong step still fails.
BFLOAT16_AUTOCAST = dict(rtol=1e-3, atol=1e-5)
FLOAT16_AUTOCAST = dict(rtol=1e-4, atol=1e-5)

# name: (script, arguments, tolerance). {init} is a file the torch run writes and the mpigrad
# run reads; other paths are relative to the program's own directory for each library.
PROGRAMS = {
    "time_sequence": ("time_sequence.py", ["--init", "{init}"], FLOAT64),
    "word_language_model": ("word_language_model.py",
                            ["--init", "{init}", "--save", "model.pt"], FLOAT32),
    "word_language_model_tied": ("word_language_model.py",
                                 ["--tied", "--init", "{init}", "--save", "model.pt"], FLOAT32),
    "dcgan": ("dcgan.py", ["--init", "{init}", "--outf", "."], FLOAT32),
    "vae": ("vae.py", ["--init", "{init}"], FLOAT64),
    "siamese_network": ("siamese_network.py", ["--init", "{init}"], FLOAT32),
    "gpt_bfloat16": ("gpt.py", ["--init", "{init}", "--out_dir", ".", "--dtype", "bfloat16"],
                     BFLOAT16_AUTOCAST),
    "gpt_bfloat16_resume": ("gpt.py", ["--init", "{init}", "--out_dir", ".", "--dtype",
                                       "bfloat16", "--init_from", "resume", "--max_iters", "8"],
                            BFLOAT16_AUTOCAST),
    "gpt_float16": ("gpt.py", ["--init", "{init}", "--out_dir", ".", "--dtype", "float16"],
                    FLOAT16_AUTOCAST),
    "gpt_float16_resume": ("gpt.py", ["--init", "{init}", "--out_dir", ".", "--dtype",
                                      "float16", "--init_from", "resume", "--max_iters", "8"],
                           FLOAT16_AUTOCAST),
}
# A resumed run continues the run before it, in the same directory.
SHARES_DIRECTORY = {"gpt_bfloat16_resume": "gpt_bfloat16", "gpt_float16_resume": "gpt_float16"}
NUMBER = re.compile(r"[-+]?\d\.\d+e[-+]\d+")


def _jobs(root, library):
    jobs = []
    for name, (script, argv, _) in PROGRAMS.items():
        init = root / "init" / f"{SHARES_DIRECTORY.get(name, name)}.pt"
        jobs.append({"name": name, "script": str(HERE / script),
                     "cwd": str(root / library / SHARES_DIRECTORY.get(name, name)),
                     "argv": [a.format(init=init) for a in argv]})
    return jobs


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """{library: {name: (stdout, traceback or None)}}, torch's run first (it writes the
    initial weights)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("programs")
    (root / "init").mkdir()
    commands = {"torch": [sys.executable],
                "mpigrad": [sys.executable, "-m", "mpigrad.compat"]}
    results = {}
    for library, command in commands.items():
        jobs_file = root / f"{library}.json"
        jobs = _jobs(root, library)
        jobs_file.write_text(json.dumps(jobs))
        run = subprocess.run(command + [str(HERE / "_run_programs.py"), str(jobs_file)],
                             capture_output=True, text=True, timeout=600,
                             env=job_environment(), cwd=root)
        assert run.returncode == 0, run.stderr[-3000:]
        results[library] = {}
        for job in jobs:
            directory = pathlib.Path(job["cwd"])
            error = directory / f"{job['name']}.err"
            results[library][job["name"]] = (
                (directory / f"{job['name']}.out").read_text(),
                error.read_text() if error.exists() else None)
    return results


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_program_prints_torchs_numbers(outputs, name):
    expected, torch_error = outputs["torch"][name]
    printed, error = outputs["mpigrad"][name]
    assert torch_error is None, f"the program fails on torch itself:\n{torch_error}"
    assert error is None, f"{name} fails on mpigrad:\n{error}"
    assert NUMBER.sub("#", printed) == NUMBER.sub("#", expected)
    numbers = [float(v) for v in NUMBER.findall(printed)]
    assert numbers, f"{name} printed no numbers to compare"
    np.testing.assert_allclose(numbers, [float(v) for v in NUMBER.findall(expected)],
                               **PROGRAMS[name][2], err_msg=f"{name}'s output:\n{printed}")
