# The set-up every jobs/ sbatch script shares, sourced after its #SBATCH lines:
#
#   source "${MPIGRAD_DIR:-$SLURM_SUBMIT_DIR}/jobs/slurm/preamble.sh" NAME SCRIPT
#
# NAME is the sbatch script's name (for messages), SCRIPT the Python script to run, relative
# to jobs/. Slurm runs a copy of the batch script from its spool directory, which is why the
# checkout is found through MPIGRAD_DIR or the submit directory and not next to the script.
#
# Environment (set before sbatch; sbatch passes the environment on):
#   MPIGRAD_DIR       the mpigrad checkout (default: the submit directory)
#   MPIGRAD_VENV      virtualenv to activate (default: $MPIGRAD_DIR/.venv); set it empty to
#                     use the environment the job inherits (conda, modules, ...)
#   MPIGRAD_LAUNCHER  srun (default) or mpirun (the site's MPI; see docs/cluster.md)
#   MPIGRAD_SRUN_MPI  srun's --mpi plugin (default pmi2, which the mpich wheel speaks)
#
# Sets: repo (the checkout), job_script (SCRIPT's full path), launcher, and launch (the
# launcher's command as an array). Exits with a message naming the setting to fix.

job_name=$1
repo=${MPIGRAD_DIR:-$SLURM_SUBMIT_DIR}
job_script=$repo/jobs/$2
venv=${MPIGRAD_VENV-$repo/.venv}
launcher=${MPIGRAD_LAUNCHER:-srun}

if [[ ! -f $job_script ]]; then
    echo "$job_name: no jobs/$2 in $repo; submit from the mpigrad checkout or set MPIGRAD_DIR" >&2
    exit 1
fi
if [[ -n $venv ]]; then
    if [[ ! -f $venv/bin/activate ]]; then
        echo "$job_name: no virtualenv at $venv; set MPIGRAD_VENV to yours," \
             "or MPIGRAD_VENV= to use the inherited environment" >&2
        exit 1
    fi
    source "$venv/bin/activate"
fi

# As many BLAS/OpenMP threads per rank as CPUs Slurm gave each task: one by default (the
# ranks use every CPU), more in the hybrid layout (`--ntasks-per-node=1 --cpus-per-task=C`:
# one rank per node computing with C threads, DDP only between nodes; see docs/cluster.md).
threads=${SLURM_CPUS_PER_TASK:-1}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
# srun no longer inherits sbatch's --cpus-per-task (Slurm 22.05 on): without this each rank
# would be bound to one CPU and its threads would share it.
export SRUN_CPUS_PER_TASK=$threads

# --kill-on-bad-exit: if one rank dies, end the others instead of leaving them waiting in a
# collective until the time limit.
case $launcher in
    srun)   launch=(srun --mpi="${MPIGRAD_SRUN_MPI:-pmi2}" --kill-on-bad-exit=1) ;;
    mpirun) launch=(mpirun -n "$SLURM_NTASKS") ;;
    *)      echo "$job_name: MPIGRAD_LAUNCHER must be srun or mpirun, not '$launcher'" >&2
            exit 1 ;;
esac
