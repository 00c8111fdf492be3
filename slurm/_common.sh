# shellcheck shell=bash
# The shared body of the sbatch scripts in slurm/ (train_1node, train_multinode, evaluate_array, rank): sourced by them,
# never run on its own. It activates the environment, picks a run directory that survives requeues,
# and starts one train.py process per GPU with srun; Lightning's SLURMEnvironment reads the ranks,
# world size, MASTER_ADDR and MASTER_PORT from SLURM's variables (docs/cluster.md).
#
# Environment variables it reads (all optional):
#   ESC_ENV_ACTIVATE  shell snippet that activates the environment, run with eval before training,
#                     e.g. 'source ~/miniconda3/bin/activate esc-eval' or 'module load cuda/12.4 && ...'.
#                     Unset: .venv/bin/python when the checkout has one (`make install`), else `python`.
#   ESC_RUN_DIR       Hydra run directory (outputs, last.ckpt, manifest.json). Default:
#                     outputs/slurm/<job name>-<job id>, which stays the same when SLURM requeues the
#                     job (same job id), so the requeued run resumes from its last.ckpt (resume: auto).
#                     Point a *new* job at an old run's directory to continue that run.
#   HF_HUB_OFFLINE    1 unless set: compute nodes read the weights fetched on a login node
#                     (docs/cluster.md, section 2); HF_HUB_OFFLINE=0 sbatch ... lets a job download.
#   ESC_JOB_CACHE     0: no per-job request cache on local disk (evaluate_array, rank; see esc_job_cache).

esc_die() {
    echo "slurm/_common.sh: $*" >&2
    exit 2
}

# Activate the environment and set ESC_PYTHON; shared by every sbatch script.
esc_activate() {
    # Activation scripts (conda's among them) often trip over `set -u`.
    ESC_PYTHON=python
    if [[ -n ${ESC_ENV_ACTIVATE:-} ]]; then
        set +u
        eval "$ESC_ENV_ACTIVATE" || esc_die "ESC_ENV_ACTIVATE failed: $ESC_ENV_ACTIVATE"
        set -u
    elif [[ -x .venv/bin/python ]]; then
        ESC_PYTHON=$PWD/.venv/bin/python
    fi
    # Since Slurm 22.05 srun no longer inherits sbatch's --cpus-per-task unless told so.
    if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
        export SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-$SLURM_CPUS_PER_TASK}
        export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
    fi
    export PYTHONUNBUFFERED=1
    export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
}

# One request cache per job on the node's local disk ($TMPDIR, else /tmp): SQLite on a network
# filesystem depends on file locks that many jobs at once cannot trust (docs/evaluation.md). The job
# starts from its run folder's copy, <run dir>/requests.sqlite (a requeued job replays what it had
# asked), and merges the local file back into it when the command ends, however it ends (a SIGTERM
# from scancel or the time limit included). Afterwards: esc cache merge <run dirs>/requests.sqlite
# --into .cache/requests.sqlite. Not when the arguments set the cache (cache=..., cache.path=...,
# cache.enabled=...) or ESC_JOB_CACHE=0. Sets ESC_CACHE_ARGS, to append to the command.
esc_job_cache() {
    local run_dir=$1
    shift
    ESC_CACHE_ARGS=()
    [[ ${ESC_JOB_CACHE:-1} == 0 ]] && return 0
    local arg
    for arg in "$@"; do
        case $arg in
            cache=* | cache.path=* | cache.enabled=* | +cache* | ++cache* | '~cache'*) return 0 ;;
        esac
    done
    ESC_LOCAL_CACHE=${TMPDIR:-/tmp}/esc-requests-${SLURM_JOB_ID:-$$}${SLURM_ARRAY_TASK_ID:+-$SLURM_ARRAY_TASK_ID}.sqlite
    ESC_RUN_CACHE=$run_dir/requests.sqlite
    rm -f "$ESC_LOCAL_CACHE"* # this job's file and SQLite's companions (-wal, -shm, .setup.lock)
    if [[ -f $ESC_RUN_CACHE ]]; then
        cp "$ESC_RUN_CACHE" "$ESC_LOCAL_CACHE"
    fi
    ESC_CACHE_ARGS=("cache.path=$ESC_LOCAL_CACHE")
    trap esc_save_cache EXIT
    trap 'exit 143' TERM # bash waits for the command, then exits: the EXIT trap saves the cache
}

esc_save_cache() {
    [[ -f ${ESC_LOCAL_CACHE:-} ]] || return 0
    mkdir -p "$(dirname "$ESC_RUN_CACHE")"
    if "$ESC_PYTHON" -m esc cache merge "$ESC_LOCAL_CACHE" --into "$ESC_RUN_CACHE" >/dev/null; then
        rm -f "$ESC_LOCAL_CACHE"*
    else
        echo "slurm/_common.sh: could not merge the job's request cache into $ESC_RUN_CACHE;" \
            "it is left at $ESC_LOCAL_CACHE" >&2
    fi
}

esc_train() {
    : "${SLURM_JOB_ID:?not inside a SLURM job: submit with sbatch (see docs/cluster.md)}"
    [[ -f train.py ]] || esc_die "no train.py in $PWD: submit from the repository root (or set ESC_REPO)"
    [[ -n ${SLURM_NTASKS_PER_NODE:-} ]] ||
        esc_die "SLURM_NTASKS_PER_NODE is unset: request --ntasks-per-node=<GPUs per node>, not --ntasks"
    local arg
    for arg in "$@"; do
        case $arg in
            -m | --multirun | --multirun=* | -m=*)
                esc_die "$arg: one sbatch job runs one training run; sweep with" \
                    "'python train.py -m hydra/launcher=slurm ...' (docs/cluster.md)" ;;
            hydra.run.dir=* | +hydra.run.dir=* | ++hydra.run.dir=*)
                esc_die "$arg: set the run directory with ESC_RUN_DIR=<dir> instead" ;;
            trainer.devices=* | trainer.num_nodes=* | ++trainer.devices=* | ++trainer.num_nodes=*)
                esc_die "$arg: devices and nodes follow the allocation; change" \
                    "sbatch --ntasks-per-node/--gpus-per-node/--nodes instead" ;;
        esac
    done

    esc_activate
    local python=$ESC_PYTHON

    local run_dir=${ESC_RUN_DIR:-outputs/slurm/${SLURM_JOB_NAME:-esc-train}-${SLURM_JOB_ID}}
    local devices=$SLURM_NTASKS_PER_NODE
    local nodes=${SLURM_NNODES:-1}
    if [[ -n ${SLURM_GPUS_ON_NODE:-} && $SLURM_GPUS_ON_NODE != "$devices" ]]; then
        echo "slurm/_common.sh: warning: $SLURM_GPUS_ON_NODE GPUs per node but $devices tasks per node;" \
            "Lightning uses one task per GPU: make --ntasks-per-node equal --gpus-per-node" >&2
    fi

    # User overrides first; the allocation's geometry and the run directory last, so that they win.
    local cmd=(
        srun --kill-on-bad-exit=1
        "$python" train.py "$@"
        "hydra.run.dir=$run_dir"
        "trainer.devices=$devices"
        "trainer.num_nodes=$nodes"
    )
    echo "job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST:-?}:" \
        "${nodes} node(s) x ${devices} task(s); run dir ${run_dir}"
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
}
