"""sbatch's option table and its getopt_long, so harp reads argv exactly as sbatch does.

The table starts with the one Slurm 22.05's ``slurm_option_table_create``
builds for sbatch (dumped from the installed libslurmfull; a unit test
re-checks it there), in the same order, because GNU getopt_long's handling
of abbreviated long options (``--part`` for ``--partition``; ``--ti`` is
ambiguous) depends on the table.  The long options later releases added
(``NEWER_OPTIONS``, up to ``TABLE_COVERS``) follow, each with the release
that added it, so harp still reads (and advises) a job that uses them, and
never mistakes such an option's value for the script.  sbatch parses with a
leading ``+`` in its short option string: options stop at the first
non-option, which is the script.

The same parser reads the ``#SBATCH`` tokens of a script: sbatch feeds those
through getopt_long with the same table.

Standard library only (harp-submit runs on every submission).
"""

from __future__ import annotations

NO, REQ, OPT = 0, 1, 2  # getopt's no_argument, required_argument, optional_argument


class OptSpec:
    """One getopt_long table entry."""

    __slots__ = ("name", "has_arg", "short", "canonical")

    def __init__(self, name: str, has_arg: int, short: str | None, canonical: str):
        self.name = name  # long name as getopt_long knows it
        self.has_arg = has_arg
        self.short = short  # the short letter sharing this option's value, if any
        self.canonical = canonical  # the option this name sets (aliases point to their target)

    def __repr__(self) -> str:
        return f"OptSpec({self.name!r}, {self.has_arg}, {self.short!r}, {self.canonical!r})"


def _spec(name: str, has_arg: int, short: str | None = None, canonical: str | None = None) -> OptSpec:
    return OptSpec(name, has_arg, short, canonical or name)


#: sbatch 22.05's long options, in libslurmfull's order.
SBATCH_OPTIONS_22_05: tuple[OptSpec, ...] = (
    _spec("account", REQ, "A"),
    _spec("acctg-freq", REQ),
    _spec("array", REQ, "a"),
    _spec("batch", REQ),
    _spec("begin", REQ, "b"),
    _spec("bb", REQ),
    _spec("bbf", REQ),
    _spec("cluster-constraint", REQ),
    _spec("chdir", REQ, "D"),
    _spec("cluster", REQ),
    _spec("clusters", REQ, "M"),
    _spec("comment", REQ),
    _spec("container", REQ),
    _spec("context", REQ),
    _spec("contiguous", NO),
    _spec("constraint", REQ, "C"),
    _spec("core-spec", REQ, "S"),
    _spec("cores-per-socket", REQ),
    _spec("cpu-freq", REQ),
    _spec("cpus-per-gpu", REQ),
    _spec("cpus-per-task", REQ, "c"),
    _spec("deadline", REQ),
    _spec("delay-boot", REQ),
    _spec("dependency", REQ, "d"),
    _spec("distribution", REQ, "m"),
    _spec("error", REQ, "e"),
    _spec("exclude", REQ, "x"),
    _spec("exclusive", OPT),
    _spec("export", REQ),
    _spec("export-file", REQ),
    _spec("extra-node-info", REQ, "B"),
    _spec("get-user-env", OPT),
    _spec("gid", REQ),
    _spec("gpu-bind", REQ),
    _spec("gpu-freq", REQ),
    _spec("gpus", REQ, "G"),
    _spec("gpus-per-node", REQ),
    _spec("gpus-per-socket", REQ),
    _spec("gpus-per-task", REQ),
    _spec("gres", REQ),
    _spec("gres-flags", REQ),
    _spec("help", NO, "h"),
    _spec("hint", REQ),
    _spec("hold", NO, "H"),
    _spec("ignore-pbs", NO),
    _spec("input", REQ, "i"),
    _spec("job-name", REQ, "J"),
    _spec("kill-on-invalid-dep", REQ),
    _spec("licenses", REQ, "L"),
    _spec("mail-type", REQ),
    _spec("mail-user", REQ),
    _spec("mcs-label", REQ),
    _spec("mem", REQ),
    _spec("mem-bind", REQ),
    _spec("mem-per-cpu", REQ),
    _spec("mem-per-gpu", REQ),
    _spec("mincpus", REQ),
    _spec("network", REQ),
    _spec("nice", OPT),
    _spec("no-kill", OPT, "k"),
    _spec("no-requeue", NO),
    _spec("nodefile", REQ, "F"),
    _spec("nodelist", REQ, "w"),
    _spec("nodes", REQ, "N"),
    _spec("ntasks", REQ, "n"),
    _spec("ntasks-per-core", REQ),
    _spec("ntasks-per-gpu", REQ),
    _spec("ntasks-per-node", REQ),
    _spec("ntasks-per-socket", REQ),
    _spec("ntasks-per-tres", REQ),
    _spec("open-mode", REQ),
    _spec("output", REQ, "o"),
    _spec("overcommit", NO, "O"),
    _spec("oversubscribe", NO, "s"),
    _spec("parsable", NO),
    _spec("partition", REQ, "p"),
    _spec("power", REQ),
    _spec("prefer", REQ),
    _spec("priority", REQ),
    _spec("profile", REQ),
    _spec("propagate", OPT),
    _spec("qos", REQ, "q"),
    _spec("quiet", NO, "Q"),
    _spec("reboot", NO),
    _spec("requeue", NO),
    _spec("reservation", REQ),
    _spec("signal", REQ),
    _spec("sockets-per-node", REQ),
    _spec("spread-job", NO),
    _spec("switches", REQ),
    _spec("tasks-per-node", REQ, None, "ntasks-per-node"),
    _spec("test-only", NO),
    _spec("thread-spec", REQ),
    _spec("threads-per-core", REQ),
    _spec("time", REQ, "t"),
    _spec("time-min", REQ),
    _spec("tmp", REQ),
    _spec("uid", REQ),
    _spec("use-min-nodes", NO),
    _spec("verbose", NO, "v"),
    _spec("version", NO, "V"),
    _spec("usage", NO),
    _spec("wait", NO, "W"),
    _spec("wait-all-nodes", REQ),
    _spec("wckey", REQ),
    _spec("wrap", REQ),
)

#: The release the option table covers: the newest Slurm release whose sbatch options it holds.
TABLE_COVERS = "26.05"

#: Long options sbatch gained after 22.05, with the release that added each.
#: Taken from doc/man/man1/sbatch.1 of each release (SchedMD/slurm, tags
#: slurm-23-02-8-1, -23-11-11-1, -24-05-8-1, -24-11-7-1, -25-05-8-1, -25-11-7-1
#: and -26-05-3-1), the value's form from the same page (``=<x>``: required,
#: ``[=x]``: optional) and checked against src/common/slurm_opt.c of the same
#: tag.  ``autocomplete`` and ``external`` are in sbatch's getopt table but not
#: on the page; they are listed because they make abbreviations ambiguous.
#: Options that were dropped later stay known (harp reads them; sbatch
#: reports them): ``--power`` (gone in 24.05).  No release added a short option.
NEWER_OPTIONS: tuple[tuple[str, OptSpec], ...] = (
    ("23.02", _spec("autocomplete", REQ)),
    ("23.02", _spec("container-id", REQ)),
    ("23.02", _spec("extra", REQ)),
    ("23.02", _spec("tres-per-task", REQ)),
    ("23.11", _spec("tres-bind", REQ)),
    ("24.05", _spec("resv-ports", OPT)),
    ("24.05", _spec("segment", REQ)),
    ("24.05", _spec("stepmgr", NO)),
    ("24.11", _spec("oom-kill-step", OPT)),
    ("25.05", _spec("external", NO)),
    ("25.11", _spec("consolidate-segments", NO)),
    ("25.11", _spec("resources", REQ)),
    ("25.11", _spec("spread-segments", NO)),
    ("26.05", _spec("container-type", REQ)),
    ("26.05", _spec("mem-update", REQ)),
)

#: Options whose argument changed after 22.05; harp accepts every release's form.
#: ``--requeue[=expedite]`` (25.11: none -> optional).  ``--get-user-env`` lost its
#: optional value in 25.05 and keeps it here (a value is then sbatch's to refuse).
_WIDENED = {"requeue": ("25.11", OPT)}

#: Options whose value a release took away; the union keeps the older, wider form.
_NARROWED = {"get-user-env": ("25.05", NO)}

#: Options a release removed (harp keeps reading them): the release that dropped each.
_DROPPED = {"power": "24.05"}

#: Every long option harp knows: 22.05's table, widened, then the newer ones.
SBATCH_OPTIONS: tuple[OptSpec, ...] = tuple(
    _spec(o.name, _WIDENED[o.name][1], o.short, o.canonical) if o.name in _WIDENED else o for o in SBATCH_OPTIONS_22_05
) + tuple(spec for _, spec in NEWER_OPTIONS)


def release_options(release: str) -> tuple[OptSpec, ...]:
    """sbatch's long options as one release (``"25.11"``) knows them.

    harp parses with the union of every release (``SBATCH_OPTIONS``), so it
    needs no ``sbatch --version`` on each submission.  That is safe on every
    release: the union only adds names, so an abbreviation resolves as the
    installed sbatch resolves it, or is ambiguous (harp steps aside and sbatch
    decides), or names an option that release does not have (sbatch refuses
    it either way).  One exception: ``--extra`` (23.02) read on 22.05, where it
    abbreviates ``--extra-node-info``; harp sizes from neither.  This
    per-release table is what tests check that against.
    """

    def key(r: str) -> tuple[int, ...]:
        return tuple(int(x) for x in r.split("."))

    widened = {n: has_arg for n, (since, has_arg) in {**_WIDENED, **_NARROWED}.items() if key(since) <= key(release)}
    return tuple(
        OptSpec(o.name, widened.get(o.name, o.has_arg), o.short, o.canonical)
        for o in SBATCH_OPTIONS_22_05
        if not (o.name in _DROPPED and key(_DROPPED[o.name]) <= key(release))
    ) + tuple(spec for since, spec in NEWER_OPTIONS if key(since) <= key(release))


#: harp-submit's own options; only on the command line, removed before sbatch runs.
HARP_OPTIONS: tuple[OptSpec, ...] = (
    _spec("harp-off", NO),
    _spec("harp-verbose", NO),
    _spec("harp-dry-run", NO),
    _spec("harp-explain", NO),
    _spec("harp-json", NO),
)
HARP_OPTION_NAMES = frozenset(o.name for o in HARP_OPTIONS)

#: sbatch's INPUT ENVIRONMENT VARIABLES (22.05's, then those 26.05 adds) and the option each one sets.
#: Environment overrides #SBATCH lines; the command line overrides both.
ENV_OPTIONS: dict[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ACCTG_FREQ": "acctg-freq",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_BATCH": "batch",
    "SBATCH_BURST_BUFFER": "bb",
    "SBATCH_CLUSTERS": "clusters",
    "SLURM_CLUSTERS": "clusters",
    "SBATCH_CLUSTER_CONSTRAINT": "cluster-constraint",
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_CONTAINER": "container",
    "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_CPU_FREQ_REQ": "cpu-freq",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu",
    "SBATCH_DEBUG": "verbose",
    "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_ERROR": "error",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_HINT": "hint",
    "SLURM_HINT": "hint",
    "SBATCH_IGNORE_PBS": "ignore-pbs",
    "SBATCH_INPUT": "input",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_BIND": "mem-bind",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output",
    "SBATCH_OVERCOMMIT": "overcommit",
    "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power",
    "SBATCH_PROFILE": "profile",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job",
    "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_USE_MIN_NODES": "use-min-nodes",
    "SBATCH_WAIT": "wait",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
    "SBATCH_WCKEY": "wckey",
    # added after 22.05 (26.05's man page); an older sbatch ignores them
    "SBATCH_CONTAINER_ID": "container-id",
    "SBATCH_CONTAINER_TYPE": "container-type",
    "SBATCH_SEGMENT_SIZE": "segment",
    "SBATCH_TRES_BIND": "tres-bind",
    "SBATCH_TRES_PER_TASK": "tres-per-task",
}

#: The environment variable harp writes when it changes a value that came from
#: the environment (one per option; aliases such as SLURM_CLUSTERS are not).
OPTION_ENV: dict[str, str] = {}
for _var, _opt in ENV_OPTIONS.items():
    OPTION_ENV.setdefault(_opt, _var)


_TRES_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def tres_per_task_cpus(value: str | None) -> int | None:
    """The CPUs per task a ``--tres-per-task`` value asks for, or None.

    Since 23.02 ``--tres-per-task=cpu=4`` is another spelling of
    ``--cpus-per-task=4`` (sbatch keeps the two in step and refuses both on
    one command line).  Entries are ``type[/name]=count``, comma-separated;
    sbatch reads the count after any one separator (``cpu:4`` too, see
    ``_set_tres_per_task_from_sibling_opt_internal`` in slurm_opt.c), with an
    optional k/m/g/t/p suffix.  A value sbatch would refuse gives None: the
    job then reaches sbatch untouched, and sbatch says why.
    """
    if not value:
        return None
    for entry in value.split(","):
        entry = entry.strip()
        if len(entry) < 5 or entry[:3].lower() != "cpu" or entry[3] not in "=:":
            continue
        count = entry[4:]
        scale = _TRES_SUFFIX.get(count[-1:].lower(), 1)
        if scale > 1:
            count = count[:-1]
        if not count.isdigit() or int(count) <= 0:
            return None
        return int(count) * scale
    return None


class GetoptError(ValueError):
    """argv or directives that sbatch itself would refuse (sbatch prints why)."""


class ParsedOption:
    """One option occurrence and where it sits, so it can be replaced in place.

    ``index`` is the token holding the option; ``value_index`` the separate
    token holding its value (``-t 10``), or None when the value is attached
    (``--time=10``, ``-t10``, ``-Hc4``) or absent.  ``value_start`` is the
    offset of an attached value inside its token.  ``spelled`` is how the
    option was written: ``--time``, ``--tim``, ``-t``.
    """

    __slots__ = ("name", "value", "index", "value_index", "value_start", "spelled")

    def __init__(
        self,
        name: str,
        value: str | None,
        index: int,
        value_index: int | None = None,
        value_start: int | None = None,
        spelled: str = "",
    ):
        self.name = name  # canonical option name
        self.value = value
        self.index = index
        self.value_index = value_index
        self.value_start = value_start
        self.spelled = spelled

    def __repr__(self) -> str:
        return (
            f"ParsedOption({self.name!r}, {self.value!r}, {self.index}, {self.value_index}, {self.value_start}, "
            f"{self.spelled!r})"
        )

    def cluster_lead(self, text: str) -> str:
        """The short flags before this option in its cluster: ``-H`` of ``-Hc``; else ''.

        ``text`` is the option's token, cut before an attached value.  When
        harp renames the option, these flags must stay in front of it.
        """
        if self.spelled.startswith("--"):
            return ""
        lead = text[: text.rfind(self.spelled[1])]
        return "" if lead == "-" else lead


class ParsedArgs:
    """getopt's result: the options, and where the non-option arguments start."""

    __slots__ = ("options", "end", "dashdash")

    def __init__(self, options: list[ParsedOption], end: int, dashdash: int | None = None):
        self.options = options
        self.end = end  # index of the first non-option token (len(tokens) when none)
        self.dashdash = dashdash  # index of a "--" that ended the options


class OptionTable:
    """A getopt_long option table plus the short option string."""

    def __init__(self, specs: tuple[OptSpec, ...]):
        self.specs = specs
        self.by_name = {s.name: s for s in specs}
        self.short: dict[str, OptSpec] = {}
        for s in specs:
            if s.short and s.short not in self.short:
                self.short[s.short] = s
        self.names = {s.canonical for s in specs}

    def lookup_long(self, name: str) -> OptSpec:
        """GNU getopt_long's long option match: exact, else an unambiguous prefix."""
        exact = self.by_name.get(name)
        if exact is not None:
            return exact
        found: OptSpec | None = None
        ambiguous = False
        for s in self.specs:
            if s.name.startswith(name):
                if found is None:
                    found = s
                elif found.has_arg != s.has_arg or not _same_val(found, s):
                    ambiguous = True
        if ambiguous:
            raise GetoptError(f"option '--{name}' is ambiguous")
        if found is None:
            raise GetoptError(f"unrecognized option '--{name}'")
        return found

    def parse(self, tokens: list[str], start: int = 0) -> ParsedArgs:
        """Parse like getopt_long with a leading '+' in optstring (REQUIRE_ORDER)."""
        out: list[ParsedOption] = []
        i = start
        n = len(tokens)
        while i < n:
            tok = tokens[i]
            if tok == "--":
                return ParsedArgs(out, i + 1, i)
            if not tok.startswith("-") or tok == "-":
                break
            if tok.startswith("--"):
                body = tok[2:]
                eq = body.find("=")
                name = body if eq < 0 else body[:eq]
                spec = self.lookup_long(name)
                if eq >= 0:
                    if spec.has_arg == NO:
                        raise GetoptError(f"option '--{spec.name}' doesn't allow an argument")
                    out.append(ParsedOption(spec.canonical, body[eq + 1 :], i, None, 2 + eq + 1, "--" + name))
                    i += 1
                elif spec.has_arg == REQ:
                    if i + 1 >= n:
                        raise GetoptError(f"option '--{spec.name}' requires an argument")
                    out.append(ParsedOption(spec.canonical, tokens[i + 1], i, i + 1, None, "--" + name))
                    i += 2
                else:
                    out.append(ParsedOption(spec.canonical, None, i, None, None, "--" + name))
                    i += 1
                continue
            # a cluster of short options: -Hv, -c4, -Hc 4
            j = 1
            advanced = False
            while j < len(tok):
                ch = tok[j]
                found = self.short.get(ch)
                if found is None or ch in ":;":
                    raise GetoptError(f"invalid option -- '{ch}'")
                spec = found
                if spec.has_arg == NO:
                    out.append(ParsedOption(spec.canonical, None, i, None, None, "-" + ch))
                    j += 1
                    continue
                rest = tok[j + 1 :]
                if rest:
                    out.append(ParsedOption(spec.canonical, rest, i, None, j + 1, "-" + ch))
                    i += 1
                elif spec.has_arg == REQ:
                    if i + 1 >= n:
                        raise GetoptError(f"option requires an argument -- '{ch}'")
                    out.append(ParsedOption(spec.canonical, tokens[i + 1], i, i + 1, None, "-" + ch))
                    i += 2
                else:
                    out.append(ParsedOption(spec.canonical, None, i, None, None, "-" + ch))
                    i += 1
                advanced = True
                break
            if not advanced:
                i += 1
        return ParsedArgs(out, i, None)


def _same_val(a: OptSpec, b: OptSpec) -> bool:
    """Whether two table entries carry the same getopt ``val``.

    In libslurmfull an option with a short letter has that letter as its val;
    the others each have their own number, except aliases (``tasks-per-node``
    shares ``ntasks-per-node``'s).  ``cluster`` and ``clusters`` differ.
    """
    if a.short or b.short:
        return a.short == b.short
    return a.canonical == b.canonical


SBATCH_TABLE = OptionTable(SBATCH_OPTIONS)
CLI_TABLE = OptionTable(SBATCH_OPTIONS + HARP_OPTIONS)
