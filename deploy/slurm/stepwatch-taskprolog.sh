#!/usr/bin/env bash
# Slurm TaskProlog for stepwatch: sets every task's stepwatch environment (and NCCL Inspector's,
# when the plugin is installed) so a job needs no wrapper script. slurm.conf:
#     TaskProlog=/etc/slurm/stepwatch-taskprolog.sh
# slurmstepd runs it as the job's user before each task and reads its stdout: a line
# `export NAME=value` sets NAME in the task's environment (the value is taken literally, no
# quoting), `print TEXT` writes TEXT to the task's output. Nothing else may go to stdout.
#
# Site settings come from $STEPWATCH_SLURM_CONFIG (default /etc/stepwatch/slurm.env, a file of
# NAME=value lines, see slurm.env.example); a job opts out with STEPWATCH_MONITOR_ENABLED=0 and
# keeps its own values: a variable the job already set is never overridden.
set -u

config="${STEPWATCH_SLURM_CONFIG:-/etc/stepwatch/slurm.env}"
if [[ -r "$config" ]]; then
    # Only NAME=value lines with stepwatch's own names: the file is read, never sourced.
    while IFS='=' read -r name value; do
        case "$name" in
            STEPWATCH_SITE_*) printf -v "$name" '%s' "$value" ;;
        esac
    done < <(grep -E '^STEPWATCH_SITE_[A-Z0-9_]+=' "$config")
fi

emit() {  # emit NAME VALUE: an export line unless the task has NAME already or VALUE is empty/unsafe
    local name="$1" value="$2"
    [[ -n "$value" ]] || return 0
    [[ -z "${!name:-}" ]] || return 0
    [[ "$value" != *$'\n'* ]] || return 0
    printf 'export %s=%s\n' "$name" "$value"
}

if [[ "${STEPWATCH_MONITOR_ENABLED:-1}" == "0" ]]; then
    exit 0
fi

# Who this task is. No STEPWATCH_RANK, STEPWATCH_WORLD_SIZE or STEPWATCH_GPU: a Slurm task is a
# rank only when srun starts one task per rank. Under torchrun (one task per node) SLURM_PROCID is
# the node's index, SLURM_NTASKS the node count and SLURM_LOCALID 0, and a STEPWATCH_* value set
# here would win over the RANK / WORLD_SIZE / LOCAL_RANK that torchrun gives each process later.
# The rank monitor (producers/monitor_config.py) resolves them itself when the process starts:
# RANK, WORLD_SIZE, LOCAL_RANK first, then SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, which are
# right exactly when srun started one task per rank and no launcher set RANK.
emit STEPWATCH_JOB "${SLURM_JOB_ID:-}"
emit STEPWATCH_NODE "${SLURMD_NODENAME:-}"
# Where to send events (the worker's topics).
emit STEPWATCH_KAFKA_BOOTSTRAP "${STEPWATCH_SITE_KAFKA_BOOTSTRAP:-}"
emit STEPWATCH_KAFKA_TOPIC_PREFIX "${STEPWATCH_SITE_KAFKA_TOPIC_PREFIX:-}"
emit STEPWATCH_SECURITY_PROTOCOL "${STEPWATCH_SITE_SECURITY_PROTOCOL:-}"
emit STEPWATCH_SECURITY_SSL_CAFILE "${STEPWATCH_SITE_SECURITY_SSL_CAFILE:-}"

# NCCL Inspector (NVIDIA/nccl ext-profiler/inspector): per-collective timings dumped as JSON
# into a per-job folder that the node agent reads. NCCL loads one profiler plugin: a job that
# set NCCL_PROFILER_PLUGIN itself keeps it.
plugin="${STEPWATCH_SITE_NCCL_INSPECTOR_PLUGIN:-/usr/local/lib/libnccl-profiler-inspector.so}"
if [[ -z "${NCCL_PROFILER_PLUGIN:-}" && -r "$plugin" && "${SLURM_JOB_ID:-}" =~ ^[0-9_]+$ ]]; then
    dump_root="${STEPWATCH_SITE_NCCL_INSPECTOR_DUMP_ROOT:-/var/lib/stepwatch/nccl-inspector}"
    dump_dir="$dump_root/$SLURM_JOB_ID"
    if mkdir -p "$dump_dir" 2>/dev/null; then
        emit NCCL_PROFILER_PLUGIN "$plugin"
        emit NCCL_INSPECTOR_ENABLE 1
        emit NCCL_INSPECTOR_DUMP_DIR "$dump_dir"
        emit NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS \
            "${STEPWATCH_SITE_NCCL_INSPECTOR_INTERVAL_US:-1000000}"
    else
        printf 'print stepwatch: cannot create %s; NCCL Inspector stays off for this task\n' "$dump_dir"
    fi
fi
exit 0
