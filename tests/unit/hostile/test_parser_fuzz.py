"""The directive parser and the unit parsers take any input a user can write.

harp-submit runs on every submission with the user's script: a parser that
raises on odd input would (fail open, but) spam a traceback-free warning at
best and lose the user's right-sizing; one that misreads would rewrite the
wrong thing.  Properties, over arbitrary text and over script-shaped text:

* ``directives.parse`` never raises, and rendering gives back the exact text;
* every token's raw span lies in its line, inside the directive block;
* the unit parsers raise nothing but ``ValueError``, and what harp formats
  reads back as the same amount.

``bench/fuzz_directives.py`` runs these far longer with atheris.
"""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harp_submit import directives, harp_lines, units

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))

# text built from the characters that matter to the parser, so inputs look like scripts
SCRIPTY = st.text(
    alphabet=st.sampled_from(
        list("#SBATCHLUsbatch-=:'\"\\ \t\r\n\x0b\x0c\x00 tJpc0123456789x,$()`;\u00a0\u2028\udcff")
    ),
    max_size=300,
)
LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "#!/bin/bash",
                "#SBATCH",
                "#SBATCH ",
                "#SLURM -t 5",
                "#SBATCH --hetjob",
                "echo",
                "",
                "#SBATCH -t",
                "#SBATCH 10",
                "#SBATCH -J 'a b'",
                '#SBATCH -J "x',
                "#SBATCH --wrap='id'",
            ]
        ),
        st.builds(
            lambda a, b: f"#SBATCH {a} {b}",
            st.sampled_from(["-t", "--time", "-J", "-c", "--mem", "-p", ":", "--"]),
            st.text(alphabet=string.printable, max_size=15),
        ),
    ),
    max_size=12,
).map(lambda ls: "\n".join(ls) + "\n")


def check_script(text: str) -> None:
    script = directives.parse(text)
    assert script.render() == text
    assert "".join(directives.split_lines(text)) == text
    for tok in script.tokens:
        line = script.lines[tok.line]
        assert 0 <= tok.start <= tok.end <= len(line)
        assert tok.line in script.directive_lines and tok.line < script.header_end
        assert tok.value  # empty arguments end a line in sbatch: never a token
    if script.error is None:
        assert script.parsed is not None
        assert script.parsed.end == len(script.tokens)
        harp_lines.find(text)  # the #HARP reader sees the same text
    else:
        assert "\n" not in script.error


@FUZZ
@given(st.text(max_size=500))
def test_parse_any_text(text: str) -> None:
    check_script(text)


@FUZZ
@given(SCRIPTY)
def test_parse_script_characters(text: str) -> None:
    check_script(text)


@FUZZ
@given(LINES)
def test_parse_script_lines(text: str) -> None:
    check_script(text)


@FUZZ
@given(st.binary(max_size=300))
def test_parse_any_bytes_as_harp_submit_decodes_them(data: bytes) -> None:
    check_script(data.decode("utf-8", "surrogateescape"))


UNIT_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from(list("0123456789-:+ kKmMgGtTbB\t.eE")), max_size=25),
    st.sampled_from(["9" * 40, "-" + "9" * 40, "2147483648", "4294967296", "1-" * 10, "::", "0-0:0:0", "INFINITE"]),
)


def _only_value_errors(fn, s: str):
    try:
        return fn(s)
    except ValueError:
        return None


@FUZZ
@given(UNIT_TEXT)
def test_unit_parsers_raise_only_value_error(s: str) -> None:
    for fn in (
        units.parse_time,
        units.parse_mem,
        units.parse_int,
        units.parse_nodes,
        units.time_str2secs,
        units.time_str2mins,
        units.str_to_mbytes,
    ):
        _only_value_errors(fn, s)
    t = _only_value_errors(units.parse_time, s)
    assert t is None or (isinstance(t, int) and t > 0 and t % 60 == 0)
    m = _only_value_errors(units.parse_mem, s)
    assert m is None or (isinstance(m, int) and m >= 0)


@FUZZ
@given(st.integers(min_value=1, max_value=10 * 365 * 24 * 60))
def test_time_round_trip(minutes: int) -> None:
    assert units.parse_time(units.format_time(minutes * 60)) == minutes * 60


@FUZZ
@given(st.integers(min_value=1, max_value=1 << 40))
def test_memory_round_trip(mb: int) -> None:
    text = units.format_mem(mb)
    assert directives.is_safe_value(text)
    assert units.parse_mem(text) == mb
