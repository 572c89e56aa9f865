"""jobs/train_lm.py: its corpus and batch layout, and end to end on a small slice of the
standard library's sources: perplexity falls at 1 and 2 ranks, and without dropout 2 ranks
train exactly as one process."""
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mpigrad as mg
from tests.distributed._environment import job_environment

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "jobs" / "train_lm.py")
MPIEXEC = shutil.which("mpiexec")
sys.path.insert(0, str(ROOT / "jobs"))  # the job imports its sibling common.py
import train_lm  # noqa: E402

needs_mpiexec = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH (pip install mpich)")

TINY = ["--max-words", "30000", "--vocab", "200", "--emsize", "16", "--nhid", "16",
        "--bptt", "20", "--batch-size", "8", "--lr", "5"]
EPOCH = re.compile(r"^\[rank 0\] epoch (\d+) \| lr \S+ \| train ppl ([0-9.]+) \| "
                   r"valid ppl ([0-9.]+) \|", re.M)


def _command(ranks, *args, timeout=240):
    return ["timeout", "-k", "10", str(timeout), MPIEXEC, "-n", str(ranks), sys.executable, JOB,
            *TINY, *args]


def run(ranks, *args, timeout=240):
    return subprocess.run(_command(ranks, *args, timeout=timeout), capture_output=True,
                          text=True, env=job_environment())


def perplexities(stdout):
    """(epoch, train ppl, valid ppl) of every epoch line rank 0 printed."""
    return [(int(e), float(t), float(v)) for e, t, v in EPOCH.findall(stdout)]


def test_corpus_keeps_the_most_frequent_training_tokens():
    tokens = "a b a c ( a b ) <eos> d d d d".split()  # d only in the validation part
    corpus = train_lm.Corpus(tokens, vocab=2)
    assert corpus.words == ["<eos>", "<unk>", "a", "b"]
    assert corpus.train.tolist() == [2, 3, 2, 1, 1, 2, 3, 1, 0, 1, 1]
    assert corpus.valid.tolist() == [1, 1]


def test_words_and_punctuation_with_eos_per_line(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("def f(x):\n    return x+1\n")
    args = train_lm.parse_args(["--text", str(text), "--max-words", "100"])
    assert train_lm.read_tokens(args) == ["def", "f", "(", "x", ")", ":", "<eos>",
                                          "return", "x", "+", "1", "<eos>"]
    args = train_lm.parse_args(["--text", str(text), "--max-words", "4"])
    assert train_lm.read_tokens(args) == ["def", "f", "(", "x"]


def test_each_rank_takes_a_contiguous_slice_of_batchifys_columns():
    ids = np.arange(23)  # 5 rows of 4 columns; the last 3 tokens do not fill a row
    whole = train_lm.batchify(ids, 4, rank=0, world=1)
    assert whole[:, 1].tolist() == [5, 6, 7, 8, 9]  # columns are consecutive text
    slices = [train_lm.batchify(ids, 4, rank, world=2) for rank in (0, 1)]
    assert [s.shape for s in slices] == [(5, 2), (5, 2)]
    np.testing.assert_array_equal(np.concatenate(slices, axis=1), whole)


@needs_mpiexec
@pytest.mark.slow
# One process's run is test_two_ranks_train_as_one_process's, which compares its weights; the
# GRU's there too (its gradients are torch's in tests/nn), so one learning curve, the LSTM's.
def test_perplexity_falls_over_two_epochs():
    ranks = 2
    result = run(ranks, "--model", "LSTM", "--epochs", "2")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = perplexities(result.stdout)
    assert [r[0] for r in rows] == [1, 2], result.stdout
    (_, train1, valid1), (_, train2, valid2) = rows
    vocabulary = 200 + 2
    assert valid1 < vocabulary, result.stdout  # better than uniform guessing already
    assert train2 < train1 and valid2 < valid1, result.stdout
    assert f"{ranks} ranks x {8 // ranks} columns" in result.stdout
    assert "training finished" in result.stdout


@needs_mpiexec
@pytest.mark.slow
@pytest.mark.parametrize("model, tied", [("LSTM", True), ("GRU", False)])
def test_two_ranks_train_as_one_process(tmp_path, model, tied):
    """Each rank's columns, its own hidden state, DDP's average and the clip on it give one
    process's weights (no dropout: the ranks' masks cannot match one process's). A third of
    the other tests' text (about 50 steps an epoch) shows it as well as all of it; the two runs
    go side by side, the one process on the core the two ranks leave."""
    common = ["--model", model, "--epochs", "2", "--dropout", "0", "--dtype", "float64",
              "--clip", "0.1", "--max-words", "10000"] + (["--tied"] if tied else [])
    jobs = {ranks: subprocess.Popen(_command(ranks, *common, "--save",
                                             str(tmp_path / f"{ranks}.npz")),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=job_environment())
            for ranks in (1, 2)}
    outputs = {}
    for ranks, job in jobs.items():
        out, err = job.communicate(timeout=300)
        assert job.returncode == 0, out + err[-3000:]
        outputs[ranks] = out
    one, two = mg.load(tmp_path / "1.npz"), mg.load(tmp_path / "2.npz")
    assert one.keys() == two.keys() and "rnn.weight_hh_l1" in one
    for name in one:
        np.testing.assert_allclose(two[name].numpy(), one[name].numpy(), rtol=0, atol=1e-10,
                                   err_msg=name)
    if tied:
        np.testing.assert_array_equal(one["decoder.weight"].numpy(),
                                      one["encoder.weight"].numpy())
    # The same perplexities too: both are means over every rank's tokens.
    for a, b in zip(perplexities(outputs[1]), perplexities(outputs[2])):
        assert a == pytest.approx(b, rel=1e-8)
    # The weights moved: a run that never stepped would also "match".
    assert not math.isclose(perplexities(outputs[1])[0][1], perplexities(outputs[1])[1][1])


@needs_mpiexec
def test_batch_columns_must_split_evenly_over_the_ranks():
    result = run(2, "--batch-size", "5")
    assert result.returncode == 2
    assert "--batch-size 5 is not a multiple of the 2 ranks" in result.stdout


def test_tied_weights_need_equal_sizes(capsys):
    with pytest.raises(SystemExit) as exited:
        train_lm.parse_args(["--tied", "--emsize", "8", "--nhid", "16"])
    assert exited.value.code == 2
    assert "--tied needs --emsize equal to --nhid" in capsys.readouterr().err
