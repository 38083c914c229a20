"""The #SBATCH parser/renderer: sbatch's reading, byte-for-byte round trips, edits that touch only their target."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harp_submit import directives as d


def opts(text: str) -> list[tuple[str, str | None]]:
    s = d.parse(text)
    assert s.error is None, s.error
    return [(o.name, o.value) for o in s.options()]


def test_reads_directives_like_sbatch() -> None:
    text = (
        "#!/bin/bash\n"
        "#SBATCH --time=10 -c 4   # four cores\n"
        "#SBATCH\t--mem 2G\n"
        "\n"
        "# a comment\n"
        "  # an indented comment\n"
        "#SLURM -J old-prefix\n"
        "#SBATCH--partition=debug\n"
        "  #SBATCH --ntasks=8\n"  # not at column 0: a comment to sbatch
        "echo start\n"
        "#SBATCH --time=99\n"  # after the first command: ignored
    )
    assert opts(text) == [
        ("time", "10"),
        ("cpus-per-task", "4"),
        ("mem", "2G"),
        ("job-name", "old-prefix"),
        ("partition", "debug"),
    ]
    s = d.parse(text)
    assert s.header_end == 9 and s.directive_lines == [1, 2, 6, 7]


def test_quotes_escapes_and_comments() -> None:
    assert opts('#!/bin/sh\n#SBATCH --comment="a b" -t 5\n') == [("comment", "a b"), ("time", "5")]
    assert opts("#!/bin/sh\n#SBATCH --comment='a b'c\n") == [("comment", "a bc")]
    assert opts('#!/bin/sh\n#SBATCH --comment=a\\"b\n') == [("comment", 'a"b')]
    assert opts('#!/bin/sh\n#SBATCH --comment="a#b" -t 5\n') == [("comment", "a#b"), ("time", "5")]
    assert opts("#!/bin/sh\n#SBATCH --comment=a#b -t 5\n") == [("comment", "a")]  # '#' starts a comment
    assert opts("#!/bin/sh\n#SBATCH -t 11#x\n") == [("time", "11")]


def test_an_empty_argument_ends_the_line() -> None:
    # sbatch's _get_argument returns NULL for "" and stops reading the line
    assert opts('#!/bin/sh\n#SBATCH "" -t 5\n#SBATCH -c 2\n') == [("cpus-per-task", "2")]


def test_a_value_may_sit_on_the_next_directive_line() -> None:
    assert opts("#!/bin/sh\n#SBATCH -t\n#SBATCH 17\n") == [("time", "17")]


def test_crlf_lines_keep_their_carriage_returns() -> None:
    text = "#!/bin/bash\r\n#SBATCH --time=10\r\n#SBATCH -c 2 # x\r\necho hi\r\n"
    s = d.parse(text)
    assert s.render() == text
    assert opts(text) == [("time", "10"), ("cpus-per-task", "2")]


@pytest.mark.parametrize(
    "text, why",
    [
        ('#!/bin/sh\n#SBATCH -t "5\n', "unmatched"),
        ("#!/bin/sh\n#SBATCH : -t 5\n", "':'"),
        ("#!/bin/sh\n#SBATCH foo -t 5\n", "invalid directive 'foo'"),
        ("#!/bin/sh\n#SBATCHX -t 5\n", "invalid directive 'X'"),
        ("#!/bin/sh\n#SBATCH --bogus\n", "unrecognized"),
        ("#!/bin/sh\n#SBATCH --comment=a\\ b\n", "invalid directive 'b'"),  # an escaped blank still splits
        ("#!/bin/sh\n#SBATCH -t\n", "requires an argument"),
    ],
)
def test_directives_sbatch_rejects_are_reported(text: str, why: str) -> None:
    s = d.parse(text)
    assert s.error is not None and why in s.error
    assert s.render() == text


def test_het_jobs_are_flagged() -> None:
    assert d.parse("#!/bin/sh\n#SBATCH -t 3\n#SBATCH hetjob\n#SBATCH -t 4\n").hetjob
    assert not d.parse("#!/bin/sh\n#SBATCH -t 3\n").hetjob


# --- round trips -------------------------------------------------------------------------


@given(st.text(alphabet=st.sampled_from(list("#SBATCHLURM -=t'\"\\\r\n\tabc:5é")), max_size=200))
def test_parse_then_render_is_identity_for_any_text(text: str) -> None:
    assert d.parse(text).render() == text


@given(st.binary(max_size=300))
def test_any_bytes_survive_decoding_parsing_and_rendering(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    assert d.parse(text).render().encode("utf-8", "surrogateescape") == data


# --- generated scripts for the edit properties ------------------------------------------

TIME_FORMS = [
    "--time=10",
    "--time 10",
    "-t 10",
    "-t10",
    "--time='10'",
    '--time="1:00:00"',
    "-Ht5",
    "-t 2-0",
    "--time=UNLIMITED",
]
OTHER_FORMS = [
    "-c 4",
    "-c4",
    "--mem=1G",
    "--mem-per-cpu 500M",
    "-J name",
    '--comment="a b"',
    "--output=x.%j",
    "-p debug",
    "--parti=a",
    "-N 1",
    "--gres=gpu:1",
    "-H",
    "--exclusive",
    "--nice=5",
]
MEM_FORMS = ["--mem=1G", "--mem 2G", "--mem-per-cpu=500M", "--mem-per-cpu 1G", "--mem-per-gpu=4G"]

ws = st.sampled_from([" ", "  ", "\t", " \t "])


@st.composite
def directive_line(draw, forms: list[str]) -> str:
    prefix = draw(st.sampled_from(["#SBATCH", "#SBATCH", "#SLURM"]))
    tokens = draw(st.lists(st.sampled_from(forms + OTHER_FORMS), min_size=1, max_size=4))
    line = prefix + draw(ws) + draw(ws).join(tokens)
    if draw(st.booleans()):
        line += draw(ws) + "# " + draw(st.sampled_from(["note", "--time=1 in a comment", "é ü", ""]))
    return line


@st.composite
def script(draw, forms: list[str] = TIME_FORMS) -> str:
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    header = draw(
        st.lists(st.one_of(directive_line(forms), st.sampled_from(["", "# comment", "  # indented"])), max_size=6)
    )
    body = draw(st.lists(st.sampled_from(["echo hi", "#SBATCH --time=99", "srun ./a.out -t 5", ""]), max_size=3))
    lines = [draw(st.sampled_from(["#!/bin/bash", "#!/usr/bin/env python3"]))] + header + ["echo start"] + body
    text = eol.join(lines)
    return text + (eol if draw(st.booleans()) else "")


def _raw_tokens(s: d.Script) -> list[tuple[int, str]]:
    return [(t.line, t.raw(s)) for t in s.tokens]


@settings(max_examples=400)
@given(script(), st.sampled_from(["0-01:30:00", "45", "2-00:00:00", "01:00:00"]))
def test_replacing_a_value_touches_only_that_option(text: str, new: str) -> None:
    s = d.parse(text)
    assume(s.error is None)
    times = [k for k, o in enumerate(s.options()) if o.name == "time"]
    assume(times)
    k = times[-1]  # the one sbatch uses
    target = s.options()[k]
    before = [(o.name, o.value) for o in s.options()]
    spans = {target.index} | ({target.value_index} if target.value_index is not None else set())
    kept = [r for n, r in enumerate(_raw_tokens(s)) if n not in spans]
    touched = {s.tokens[n].line for n in spans}
    old_lines = list(s.lines)

    d.replace_option(s, target, "time", new)
    after = d.parse(s.render())

    assert after.error is None
    expected = list(before)
    expected[k] = ("time", new)
    assert [(o.name, o.value) for o in after.options()] == expected
    # every other token is the same text on the same line ...
    t = after.options()[k]
    spans_after = {t.index} | ({t.value_index} if t.value_index is not None else set())
    assert [r for n, r in enumerate(_raw_tokens(after)) if n not in spans_after] == kept
    # ... and every line without the target is byte-identical
    assert len(after.lines) == len(old_lines)
    assert [a for n, a in enumerate(after.lines) if n not in touched] == [
        a for n, a in enumerate(old_lines) if n not in touched
    ]


@settings(max_examples=300)
@given(script(MEM_FORMS), st.sampled_from(["mem", "mem-per-cpu", "mem-per-gpu"]), st.sampled_from(["4G", "1500M"]))
def test_renaming_a_memory_option_changes_only_it(text: str, name: str, value: str) -> None:
    s = d.parse(text)
    assume(s.error is None)
    mems = [k for k, o in enumerate(s.options()) if o.name in ("mem", "mem-per-cpu", "mem-per-gpu")]
    assume(mems)
    k = mems[-1]
    before = [(o.name, o.value) for o in s.options()]
    d.replace_option(s, s.options()[k], name, value)
    after = d.parse(s.render())
    assert after.error is None
    expected = list(before)
    expected[k] = (name, value)
    assert [(o.name, o.value) for o in after.options()] == expected


@settings(max_examples=300)
@given(script(), st.sampled_from(["gres", "mem", "cpus-per-task"]), st.sampled_from(["gpu:1", "4G", "8"]))
def test_inserting_adds_exactly_one_directive_line(text: str, name: str, value: str) -> None:
    s = d.parse(text)
    assume(s.error is None)
    before = [(o.name, o.value) for o in s.options()]
    old_lines = list(s.lines)
    at = d.insert_directive(s, name, value)
    after = d.parse(s.render())
    assert after.error is None
    assert [(o.name, o.value) for o in after.options()] == before + [(name, value)]
    new_lines = after.lines
    assert len(new_lines) == len(old_lines) + 1
    assert d.line_body(new_lines[at]).rstrip("\r") == f"#SBATCH --{name}={value}"
    rest = new_lines[:at] + new_lines[at + 1 :]
    # the line before the insertion may have gained a line ending; nothing else changes
    for n, (a, b) in enumerate(zip(old_lines, rest)):
        assert a == b or (n == at - 1 and b == a + ("\r\n" if new_lines[at].endswith("\r\n") else "\n"))
    eol = "\r\n" if "\r\n" in text else "\n"
    assert new_lines[at].endswith(eol)


def test_insert_goes_after_the_last_directive_or_the_shebang() -> None:
    s = d.parse("#!/bin/bash\n#SBATCH -t 5\n# note\necho hi\n")
    d.insert_directive(s, "mem", "4G")
    assert s.render() == "#!/bin/bash\n#SBATCH -t 5\n#SBATCH --mem=4G\n# note\necho hi\n"
    s = d.parse("#!/bin/bash\necho hi\n")
    d.insert_directive(s, "time", "01:00:00")
    assert s.render() == "#!/bin/bash\n#SBATCH --time=01:00:00\necho hi\n"
    s = d.parse("#!/bin/bash")
    d.insert_directive(s, "time", "5")
    assert s.render() == "#!/bin/bash\n#SBATCH --time=5\n"


@pytest.mark.parametrize(
    "line, option, name, value, expected",
    [
        ("#SBATCH --time=10 # keep me", "time", "time", "45", "#SBATCH --time=45 # keep me"),
        ("#SBATCH  -t   10\t-c 2", "time", "time", "45", "#SBATCH  -t   45\t-c 2"),
        ("#SBATCH -Ht10", "time", "time", "45", "#SBATCH -Ht45"),
        ('#SBATCH --time="10"', "time", "time", "45", "#SBATCH --time=45"),
        ("#SBATCH --parti=a", "partition", "partition", "gpu", "#SBATCH --parti=gpu"),
        ("#SBATCH --mem-per-cpu=1G -c 2", "mem-per-cpu", "mem", "4G", "#SBATCH --mem=4G -c 2"),
        ("#SBATCH --mem-per-cpu 1G", "mem-per-cpu", "mem", "4G", "#SBATCH --mem 4G"),
        ("#SBATCH -Hc4", "cpus-per-task", "cpus-per-task", "8", "#SBATCH -Hc8"),
    ],
)
def test_replace_examples(line: str, option: str, name: str, value: str, expected: str) -> None:
    s = d.parse(f"#!/bin/sh\n{line}\necho\n")
    target = [o for o in s.options() if o.name == option][-1]
    d.replace_option(s, target, name, value)
    assert s.render() == f"#!/bin/sh\n{expected}\necho\n"


def test_unsafe_values_are_refused() -> None:
    s = d.parse("#!/bin/sh\n#SBATCH -t 5\n")
    with pytest.raises(ValueError):
        d.replace_option(s, s.options()[0], "time", "5 # x")
    with pytest.raises(ValueError):
        d.insert_directive(s, "gres", "gpu:1\n#SBATCH --uid=0")
