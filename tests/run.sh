#!/usr/bin/env bash
# The whole test suite: once serially, then the MPI-marked tests on 2 and on 3 ranks.
#
#   bash tests/run.sh                 # from the repository root, with the venv active
#   bash tests/run.sh -k ddp -x       # extra arguments go to every pytest run
#
# Every step runs even when an earlier one failed; the exit code is non-zero if any did.
# Each step's output is also saved in $MPIGRAD_TEST_LOGS (default: a temporary
# directory), and the summary at the end repeats the FAILED/ERROR lines, since under
# mpiexec the ranks' output is interleaved. The summary gives each step's passed / skipped /
# failed counts (one line per distinct rank outcome under MPI), so a wave of skips shows.

set -uo pipefail  # not -e: a failing step must not stop the others

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

# One BLAS/OpenMP thread per process: the MPI steps start several on a small machine.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# Whole lines reach mpiexec's output as they are written, not in 8 KiB blocks.
export PYTHONUNBUFFERED=1

logs=${MPIGRAD_TEST_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/mpigrad-tests.XXXXXX")}
mkdir -p "$logs"

# Bytecode, written: the steps start about ten pytest processes and the tests as many Python
# jobs again, and each would otherwise compile mpigrad and rewrite the test modules' asserts
# anew (about 10 s of CPU per pytest process). Into the logs directory, not the source tree,
# so PYTHONDONTWRITEBYTECODE's usual reason (a clean tree) still holds.
if [[ -n ${PYTHONDONTWRITEBYTECODE:-} ]]; then
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$logs/pycache}
fi
# For Open MPI's mpiexec, if that is the one installed (MPICH ignores these): allow root
# (containers, CI), and more ranks than cores.
if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe

names=()
logfiles=()
results=()
failed=0

# skip_reasons LOGFILE: each skip reason of the step's "-rs" report with how many tests it
# skipped (under MPI each rank reports the same lines: identical ones are counted once), so a
# skip for something not installed stands out among the expected ones.
skip_reasons() {
    grep -aoE 'SKIPPED \[[0-9]+\] [^ ]+: .*$' "$1" | sort -u \
        | sed -E 's/^SKIPPED \[([0-9]+)\] [^ ]+: (.*)$/\1\t\2/' \
        | awk -F'\t' '{n[$2] += $1} END {for (r in n) printf "%7d  %s\n", n[r], r}' \
        | sort -rn
}

# slowest LOGFILE: the 15 slowest test phases of pytest's --durations report (every rank's).
slowest() {
    # sed: under MPI another rank's banner can run on at the end of the line.
    grep -aoE '^[0-9]+\.[0-9]+s (call|setup|teardown) +.*$' "$1" | sed -E 's/ ?={3,}.*$//' \
        | sort -rn -k1,1 | head -15
}

# counts LOGFILE: pytest's closing "N passed, M skipped ..." line, once per distinct outcome
# (each rank prints its own under MPI; ranks that disagree show as several, "a | b").
counts() {
    local lines
    lines=$(grep -aoE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|warnings?)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$1" \
        | sed -E 's/ in [0-9.]+s$//' | sort -u | paste -sd ';' | sed 's/;/ | /g')
    echo "${lines:-no pytest summary}"
}

# step NAME LOGFILE MPI(yes/no) COMMAND...: run, record the outcome, never exit.
step() {
    local name=$1 log=$2 mpi=$3
    shift 3
    echo
    echo "=== $name: $*"
    local start=$SECONDS status=0
    "$@" < /dev/null 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
    local took=$((SECONDS - start)) outcome
    # pytest exit codes: 0 all passed, 1 tests failed, 2 interrupted, 3 internal error,
    # 4 usage error, 5 no tests collected (the suite or its path is broken: a failure).
    # 124/137 come from `timeout`.
    case $status in
        0)       outcome="passed" ;;
        1)       outcome="FAILED (tests failed)" ;;
        5)       outcome="FAILED (no tests collected)" ;;
        124|137) outcome="FAILED (timed out)" ;;
        *)       outcome="FAILED (exit $status)" ;;
    esac
    # Under MPI every non-MPI test is skipped; a pass where nothing ran proves nothing.
    if [[ $status == 0 && $mpi == yes ]] && ! grep -aqE '[0-9]+ passed' "$log"; then
        outcome="FAILED (no MPI test ran)"
        status=1
    fi
    names+=("$name")
    logfiles+=("$log")
    results+=("$outcome, ${took}s; $(counts "$log")")
    if [[ $status != 0 ]]; then
        failed=1
    fi
}

# --only-mpi and not --with-mpi: with pytest-mpi 0.6, --with-mpi runs every test on every
# rank, and it wins when both are given; --only-mpi runs the MPI-marked tests (tests/conftest.py
# deselects the rest). -rfEs: failures, errors and skips (the summary below counts the skips
# by reason).
#
# The serial step (no MPI) runs on one pytest-xdist worker per core, up to four (the test
# extra installs xdist; MPIGRAD_TEST_WORKERS=1 runs it in this one process). A module stays
# on one worker (--dist loadfile), so its module fixtures, which often launch a job for all
# of its tests, run once.
# (Not nproc: it counts OMP_NUM_THREADS, set to 1 above.)
workers=${MPIGRAD_TEST_WORKERS:-$(python -c 'import os; print(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())')}
(( workers > 4 )) && workers=4
parallel=()
if (( workers > 1 )) && python -c "import xdist" 2>/dev/null; then
    parallel=(-n "$workers" --dist loadfile)
fi
step "serial" "$logs/serial.log" no \
    timeout -k 30 1800 python -m pytest "${parallel[@]}" --durations=15 "$@"
step "mpi -n 2" "$logs/mpi-2.log" yes \
    timeout -k 30 900 mpiexec -n 2 python -m pytest --only-mpi -q -rfEs --durations=15 -p no:cacheprovider "$@"
step "mpi -n 3" "$logs/mpi-3.log" yes \
    timeout -k 30 900 mpiexec -n 3 python -m pytest --only-mpi -q -rfEs --durations=15 -p no:cacheprovider "$@"

echo
echo "=== summary (logs in $logs)"
for i in "${!names[@]}"; do
    printf '  %-9s %s\n' "${names[$i]}" "${results[$i]}"
    if [[ ${results[$i]} != passed* ]]; then
        # Not anchored at the line start: another rank's output may precede it.
        grep -aoE '(FAILED|ERROR) [^ ]+( - .*)?$' "${logfiles[$i]}" | sort -u | sed 's/^/      /'
    fi
    echo "    skipped, by reason:"
    skip_reasons "${logfiles[$i]}" | sed 's/^/    /'
    echo "    slowest:"
    slowest "${logfiles[$i]}" | sed 's/^/      /'
done
exit $failed
