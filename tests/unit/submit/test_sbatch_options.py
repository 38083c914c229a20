"""sbatch's option table and getopt_long: checked against libslurmfull and glibc themselves."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harp_submit.sbatch_options import CLI_TABLE, SBATCH_OPTIONS, SBATCH_OPTIONS_22_05, SBATCH_TABLE, GetoptError

LIBSLURM = "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"
OPTSTRING = "+A:a:b:D:M:C:S:c:d:m:e:x:B:G:hHi:J:L:k::F:w:N:n:o:Osp:q:Qt:vVW"


def parse(*tokens: str) -> list[tuple[str, str | None]]:
    return [(o.name, o.value) for o in SBATCH_TABLE.parse(list(tokens)).options]


def test_long_forms_with_equals_or_space() -> None:
    assert parse("--time=10", "--mem", "4G", "--partition=debug") == [
        ("time", "10"),
        ("mem", "4G"),
        ("partition", "debug"),
    ]


def test_short_forms_attached_separate_and_clustered() -> None:
    assert parse("-t10", "-c", "4", "-Hn2", "-Qvp", "gpu") == [
        ("time", "10"),
        ("cpus-per-task", "4"),
        ("hold", None),
        ("ntasks", "2"),
        ("quiet", None),
        ("verbose", None),
        ("partition", "gpu"),
    ]


def test_unambiguous_abbreviations_resolve_and_ambiguous_ones_fail() -> None:
    assert parse("--part=debug", "--cpus-per-t", "2") == [("partition", "debug"), ("cpus-per-task", "2")]
    for bad in ("--ti=3", "--mem-p=1G", "--clu=x"):
        with pytest.raises(GetoptError, match="ambiguous"):
            parse(bad)


def test_alias_counts_as_its_target() -> None:
    assert parse("--tasks-per-node=2") == [("ntasks-per-node", "2")]


def test_optional_arguments_only_attach() -> None:
    # "--nice 5": 5 is not the argument, it is the script (sbatch's behaviour too)
    p = SBATCH_TABLE.parse(["--nice", "5"])
    assert [(o.name, o.value) for o in p.options] == [("nice", None)] and p.end == 1
    assert parse("--nice=5", "-koff") == [("nice", "5"), ("no-kill", "off")]


def test_options_stop_at_the_script_and_at_double_dash() -> None:
    p = SBATCH_TABLE.parse(["-t", "5", "job.sh", "--time=9"])
    assert p.end == 2 and [o.name for o in p.options] == ["time"]
    p = SBATCH_TABLE.parse(["-H", "--", "-t"])
    assert p.end == 2 and p.dashdash == 1
    assert SBATCH_TABLE.parse(["-H", "-"]).end == 1  # a lone "-" is an argument


@pytest.mark.parametrize("argv", [["--bogus"], ["-y"], ["-t"], ["--time"], ["--hold=1"], ["--harp-off"]])
def test_errors(argv: list[str]) -> None:
    with pytest.raises(GetoptError):
        SBATCH_TABLE.parse(argv)


def test_harp_options_only_in_the_cli_table() -> None:
    p = CLI_TABLE.parse(["--harp-dry-run", "--harp-verb", "-J", "--harp-off", "x.sh", "--harp-off"])
    assert [(o.name, o.value) for o in p.options] == [
        ("harp-dry-run", None),
        ("harp-verbose", None),
        ("job-name", "--harp-off"),
    ]
    assert p.end == 4


def test_locations_allow_in_place_edits() -> None:
    p = SBATCH_TABLE.parse(["-Hc4", "--time", "5", "--mem=1G"])
    c, t, m = p.options[1:]
    assert (c.index, c.value_start, c.value_index, c.spelled) == (0, 3, None, "-c")
    assert (t.index, t.value_index, t.spelled) == (1, 2, "--time")
    assert (m.index, m.value_start) == (3, 6)


# --- the table is the installed sbatch's ---------------------------------------------

DUMP = textwrap.dedent(
    """
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.slurm_init(None)
    lib.spank_init_allocator()
    opt = ctypes.create_string_buffer(1 << 16)
    sbatch_opt = ctypes.create_string_buffer(1 << 16)
    ctypes.c_void_p.from_buffer(opt, 8).value = ctypes.addressof(sbatch_opt)  # slurm_opt_t.sbatch_opt
    class Opt(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("has_arg", ctypes.c_int),
                    ("flag", ctypes.c_void_p), ("val", ctypes.c_int)]
    lib.slurm_option_table_create.restype = ctypes.POINTER(Opt)
    optstring = ctypes.c_char_p()
    table = lib.slurm_option_table_create(opt, ctypes.byref(optstring))
    print(optstring.value.decode())
    i = 0
    while table[i].name:
        print(table[i].name.decode(), table[i].has_arg, table[i].val)
        i += 1
    """
)


@pytest.mark.skipif(not os.path.exists(LIBSLURM), reason="libslurmfull not installed")
def test_table_matches_installed_sbatch(tmp_path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=probe\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
        f"PartitionName=p Nodes=localhost Default=YES\nPlugStackConfig={tmp_path}/plugstack.conf\n"
    )
    (tmp_path / "plugstack.conf").write_text("")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    out = subprocess.run([sys.executable, "-c", DUMP, LIBSLURM], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == OPTSTRING
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == [s.name for s in SBATCH_OPTIONS_22_05]
    assert [int(r[1]) for r in rows] == [s.has_arg for s in SBATCH_OPTIONS_22_05]
    for (name, _, val), spec in zip(rows, SBATCH_OPTIONS_22_05):
        val = int(val)
        if val < 256:
            assert spec.short == chr(val), name
        else:
            assert spec.short is None, name
    # options sharing a numeric val are aliases of one canonical option
    by_val: dict[str, set[str]] = {}
    for (_, _, val), spec in zip(rows, SBATCH_OPTIONS_22_05):
        by_val.setdefault(val, set()).add(spec.canonical)
    assert all(len(c) == 1 for c in by_val.values())


# --- the parser is glibc's getopt_long --------------------------------------------------


class _COpt(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("has_arg", ctypes.c_int), ("flag", ctypes.c_void_p), ("val", ctypes.c_int)]


@pytest.fixture(scope="module")
def glibc_getopt():
    libc = ctypes.CDLL("libc.so.6")
    names = [s.canonical for s in SBATCH_OPTIONS]
    table = (_COpt * (len(SBATCH_OPTIONS) + 1))()
    for k, s in enumerate(SBATCH_OPTIONS):
        table[k] = _COpt(s.name.encode(), s.has_arg, None, ord(s.short) if s.short else 1000 + names.index(s.canonical))
    optind = ctypes.c_int.in_dll(libc, "optind")
    ctypes.c_int.in_dll(libc, "opterr").value = 0
    optarg = ctypes.c_char_p.in_dll(libc, "optarg")
    libc.getopt_long.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.c_char_p,
        ctypes.POINTER(_COpt),
        ctypes.POINTER(ctypes.c_int),
    ]

    def run(tokens: list[str]):
        argv = (ctypes.c_char_p * (len(tokens) + 2))(b"sbatch", *[t.encode() for t in tokens], None)
        optind.value = 0  # full re-initialisation
        out = []
        idx = ctypes.c_int(0)
        while True:
            r = libc.getopt_long(len(tokens) + 1, argv, OPTSTRING.encode(), table, ctypes.byref(idx))
            if r == -1:
                return out, optind.value - 1
            if r in (ord("?"), ord(":")):
                return "error"
            name = SBATCH_TABLE.short[chr(r)].canonical if r < 1000 else names[r - 1000]
            out.append((name, optarg.value.decode() if optarg.value is not None else None))

    return run


PIECES = [
    "-t",
    "10",
    "--time",
    "--time=5",
    "--ti",
    "--tim",
    "--mem",
    "--mem=1G",
    "--mem-p=2",
    "--mem-per-c",
    "-c4",
    "-Hc",
    "4",
    "-H",
    "-k",
    "-koff",
    "--no-kill",
    "--no-kill=off",
    "--nice",
    "--nice=5",
    "--excl=user",
    "job.sh",
    "-",
    "--",
    "-Q",
    "-vV",
    "--clu",
    "--cluster=a",
    "--tasks",
    "--ntasks-per-n",
    "--part",
    "--p",
    "-p",
    "debug",
    "--wra=x",
    "--h",
    "--hold",
    "--hi",
    "-:",
    "--wait=1",
    "--=",
    "--mem=",
    "-Hk",
    "--gpus-per",
]


@settings(max_examples=2000)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet="-=tHkc:5", max_size=5)), max_size=7))
def test_getopt_matches_glibc(glibc_getopt, tokens: list[str]) -> None:
    if any("\0" in t for t in tokens):
        return
    try:
        p = SBATCH_TABLE.parse(tokens)
        mine = ([(o.name, o.value) for o in p.options], p.end)
    except GetoptError:
        mine = "error"
    assert mine == glibc_getopt(tokens)
