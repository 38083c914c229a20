"""Where a launcher's own arguments end and the program it launches begins.

``srun --unbuffered --output /logs/%j_%t_log.out python -u -m submitit.core._submit /logs``
runs ``python -m submitit.core._submit``, not ``%j_%t_log.out``: a parser that
guesses whether an option takes a value (a number? a two-character option?)
takes option values for programs, and then every job of a client that passes
``--output PATH`` to srun is one program to harp (#51).  So each launcher's
options that take a value are listed here, as their manuals give them (long
and short forms); ``--opt=VALUE`` and ``-oVALUE`` carry their value inside.

An option no table knows is taken as a flag unless the next word looks like no
program (a number, a Slurm filename pattern with ``%``, a ``key=value``): an
unknown flag followed by the program is far commoner than an unknown option
followed by a value that looks like a program.
"""

from __future__ import annotations

import re

# srun (Slurm 22.05-25.x manual): the options that take a value
_SRUN = frozenset(
    """
    -A --account --acctg-freq -B --extra-node-info --bb --bbf --bcast --begin -c --cpus-per-task
    --comment --compress --container --container-id -C --constraint --core-spec --cores-per-socket
    --cpu-bind --cpu-freq --cpus-per-gpu -d --dependency -D --chdir --distribution -m -e --error
    --epilog --export --gid -G --gpus --gpu-bind --gpu-freq --gpus-per-node --gpus-per-socket
    --gpus-per-task --gres --gres-flags --het-group -i --input -J --job-name --jobid -K --kill-on-bad-exit
    -L --licenses --mail-type --mail-user --mcs-label --mem --mem-per-cpu --mem-per-gpu --mem-bind
    --mincpus --mpi --network --nice -n --ntasks --ntasks-per-core --ntasks-per-gpu --ntasks-per-node
    --ntasks-per-socket -N --nodes -o --output --open-mode -p --partition --power --prefer --priority
    --profile --prolog --propagate -q --qos --reservation --resv-ports -S --core-spec
    --signal --slurmd-debug --sockets-per-node --switches -T --threads --task-epilog --task-prolog
    --thread-spec --threads-per-core -t --time --time-min --tmp --tres-bind --tres-per-task --uid
    --umask -w --nodelist -W --wait --wckey -x --exclude --x11 --cluster -M --clusters --delay-boot
    --deadline --network --segment --stepmgr --send-libs
    """.split()
) - {"-K", "--kill-on-bad-exit", "--x11", "--send-libs", "--resv-ports", "--stepmgr"}

# Open MPI, MPICH/Hydra and Intel MPI's mpirun/mpiexec
_MPI = frozenset(
    """
    -n -np -c --np -N --npernode -npernode --npersocket -npersocket --map-by --rank-by --bind-to
    -H --host -host -hosts --hosts --hostfile -hostfile -machinefile --machinefile -f -ppn -perhost
    --mca -mca --gmca -gmca -x -genv -env -genvlist -envlist -wdir --wdir -wd -d --prefix -prefix
    --report-bindings-file --output-filename -output-filename --tag-output-file --timeout -timeout
    -configfile --app -launcher -bootstrap -rmk -iface -errfile-pattern -outfile-pattern -l --path
    --preload-files --personality --with-ft --rankfile -rf --cpu-set --cpus-per-proc --cpus-per-rank
    -launcher-exec -bootstrap-exec -gpath -gwdir -gumask -umask -genvall -profile
    """.split()
) - {"-l", "-genvall"}

# the rest: launchers and wrappers whose options that take a value are few
_TABLES: dict[str, frozenset[str]] = {
    "srun": _SRUN,
    "mpirun": _MPI,
    "mpiexec": _MPI,
    "mpiexec.hydra": _MPI,
    "orterun": _MPI,
    "prterun": _MPI,
    "ibrun": frozenset({"-n", "-o"}),
    "aprun": frozenset({"-n", "-N", "-d", "-S", "-cc", "-j", "-L", "-m", "-p", "-r", "-t", "-e"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "numactl": frozenset(
        {
            "-i",
            "--interleave",
            "-m",
            "--membind",
            "-N",
            "--cpunodebind",
            "-C",
            "--physcpubind",
            "-p",
            "--preferred",
            "-P",
            "--preferred-many",
        }
    ),
    "taskset": frozenset(),  # its mask or list is positional (see _POSITIONAL)
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nohup": frozenset(),
    "xargs": frozenset(
        {"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args"}
        | {"--max-procs", "--max-lines", "--max-chars", "--replace", "--eof", "--process-slot-var"}
    ),
    "parallel": frozenset({"-j", "--jobs", "-S", "--sshlogin", "--joblog", "--results", "-a", "--arg-file"}),
    "torchrun": frozenset(
        {
            "--nnodes",
            "--nproc-per-node",
            "--nproc_per_node",
            "--rdzv-backend",
            "--rdzv_backend",
            "--rdzv-endpoint",
            "--rdzv_endpoint",
            "--rdzv-id",
            "--rdzv_id",
            "--rdzv-conf",
            "--rdzv_conf",
            "--max-restarts",
            "--max_restarts",
            "--monitor-interval",
            "--monitor_interval",
            "--start-method",
            "--start_method",
            "--role",
            "--node-rank",
            "--node_rank",
            "--master-addr",
            "--master_addr",
            "--master-port",
            "--master_port",
            "--log-dir",
            "--log_dir",
            "-r",
            "--redirects",
            "-t",
            "--tee",
            "--local-addr",
            "--local_addr",
        }
    ),
    "accelerate": frozenset(
        {"--config_file", "--num_processes", "--num_machines", "--machine_rank", "--main_process_ip"}
        | {"--main_process_port", "--mixed_precision", "--gpu_ids", "--num_cpu_threads_per_process"}
    ),
    "deepspeed": frozenset(
        {"-H", "--hostfile", "-i", "--include", "-e", "--exclude", "--num_nodes", "--num_gpus", "--master_port"}
        | {"--master_addr", "--launcher", "--launcher_args"}
    ),
    "apptainer": frozenset(
        {"-B", "--bind", "--env", "--env-file", "-H", "--home", "-W", "--workdir", "--mount", "-o", "--overlay"}
        | {"--pwd", "-S", "--scratch", "--security", "--app", "--network", "--network-args", "--hostname"}
    ),
    "bash": frozenset({"-o", "-O", "--init-file", "--rcfile"}),
    "sh": frozenset({"-o"}),
}
_TABLES["singularity"] = _TABLES["apptainer"]

#: launchers whose first non-option words are theirs, not the program's:
#: ``taskset MASK prog``, ``timeout DURATION prog``, ``apptainer exec IMAGE prog``
_POSITIONAL: dict[str, int] = {"taskset": 1, "timeout": 1, "apptainer": 2, "singularity": 2}

_NUM = re.compile(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?[a-zA-Z]{0,3}")
_NOT_A_PROGRAM = re.compile(r".*(%|=|^\d|^[,:]).*", re.S)

LAUNCHERS = frozenset(_TABLES) | {"exec"}
_MPI_NAMES = frozenset(name for name, table in _TABLES.items() if table is _MPI)


def takes_value(launcher: str, option: str) -> bool:
    """Whether ``option`` (as written, without ``=VALUE``) of ``launcher`` takes the next word as its value."""
    return option in _TABLES.get(launcher, frozenset())


def program_start(tokens: list[str], start: int) -> int:
    """The index of the first word after the launcher at ``tokens[start]`` and its own arguments.

    Never raises: any list of words gives an index in ``start + 1 .. len(tokens)``.
    """
    n = len(tokens)
    launcher = tokens[start].rsplit("/", 1)[-1]
    table = _TABLES.get(launcher, frozenset())
    i = start + 1
    positional = _POSITIONAL.get(launcher, 0)
    while i < n:
        t = tokens[i]
        if t == "--":  # the end of the launcher's options
            i += 1
            break
        if t.startswith("-") and len(t) > 1:
            i += 1
            if "=" in t and t.startswith("--"):
                continue  # --opt=VALUE
            if launcher in _MPI_NAMES and t in ("-genv", "-env"):
                i += 2  # Hydra's -genv NAME VALUE
            elif t in table or (not positional and i < n and _looks_like_value(tokens[i])):
                i += 1  # --opt VALUE / -o VALUE, or an option no table knows followed by what can only be a value
            continue
        if positional > 0:
            positional -= 1
            i += 1
            continue
        break
    return min(i, n)


def _looks_like_value(word: str) -> bool:
    """A word that no program is called: a number, a Slurm filename pattern, a ``key=value``, a list."""
    return bool(_NUM.fullmatch(word) or _NOT_A_PROGRAM.fullmatch(word))
