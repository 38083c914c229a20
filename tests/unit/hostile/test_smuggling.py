"""Nothing gets smuggled through harp's rewrite into sbatch's options.

Two attackers are considered:

* a **daemon that lies** (compromised, buggy, or an impostor on the socket
  path): its decision values are the only text harp-submit writes into a
  submission, so every value that could read as more than one value (blank,
  newline, quote, comment, ``$(...)``, a leading ``-``) must be refused, and
  the user's job submitted unchanged;
* a **crafted script**: whatever its directive lines look like, harp's edit
  must change exactly the targeted value and nothing else sbatch reads, so
  the options sbatch sees after the rewrite are the user's own plus the one
  change (checked here with hypothesis over generated directive blocks).
"""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from harp_submit import directives, units
from harp_submit.decision import CHANGEABLE, BadDecision, validate
from harp_submit.request import MEMORY_OPTIONS, Request
from harp_submit.rewrite import RewriteError, apply
from harp_submit.sbatch_options import SBATCH_TABLE

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
LIMITS = {"partition": None, "max_time_s": None, "max_mem_mb": None, "max_cpus": None}


def answer(option: str, value: object) -> dict:
    return {"ok": True, "decision": {"changes": [{"option": option, "value": value, "reason": "r"}], "limits": LIMITS}}


# ------------------------------------------------------------- a lying daemon

SMUGGLING_VALUES = [
    "1 --wrap=touch /tmp/pwned",
    "1\n#SBATCH --wrap=touch /tmp/pwned",
    "1\r\n#SBATCH --uid=0",
    "short --uid=0",
    "short\t--uid=0",
    "--wrap=touch",
    "--uid=0",
    "-w",
    "--",
    "-",
    "gpu:1 --wrap=id",
    "$(touch /tmp/pwned)",
    "`touch /tmp/pwned`",
    "short;touch /tmp/pwned",
    "short|id",
    "short&&id",
    "'short'",
    '"short"',
    "short#--uid=0",
    "short\\ --uid=0",
    "short\x00--uid=0",
    "short\u00a0--uid=0",  # no-break space
    "short\u2028--uid=0",  # line separator
    "short\x0b--uid=0",  # vertical tab: C isspace
    "short\x0c--uid=0",
    "",
    "${IFS}",
    "short>out",
    "*",
    "~root",
]


@pytest.mark.parametrize("option", CHANGEABLE)
@pytest.mark.parametrize("value", SMUGGLING_VALUES, ids=repr)
def test_a_decision_value_that_could_smuggle_is_refused(option: str, value: str) -> None:
    with pytest.raises(BadDecision, match=r"unusable value|sbatch would reject|not a memory size"):
        validate(answer(option, value), {})


@pytest.mark.parametrize("value", [None, 5, 5.0, ["5"], {"v": "5"}, True])
def test_a_decision_value_that_is_not_text_is_refused(value: object) -> None:
    with pytest.raises(BadDecision, match="unusable value"):
        validate(answer("time", value), {})


@pytest.mark.parametrize(
    "option",
    [
        "uid",
        "gid",
        "wrap",
        "export",
        "chdir",
        "output",
        "comment",
        "dependency",
        "--time",
        "time ",
        "TIME",
        "t",
        "",
        None,
        1,
    ],
)
def test_a_decision_may_only_change_resource_options(option: object) -> None:
    with pytest.raises(BadDecision, match="cannot change option"):
        validate({"ok": True, "decision": {"changes": [{"option": option, "value": "5"}], "limits": LIMITS}}, {})


SAFE = frozenset(string.ascii_letters + string.digits + "_:-.,=/+%@[]")


@FUZZ
@given(option=st.sampled_from(CHANGEABLE), value=st.text(min_size=0, max_size=30))
@example(option="partition", value="-x")
@example(option="gres", value="gpu:1\n")
def test_any_value_with_a_character_beyond_the_safe_set_is_refused(option: str, value: str) -> None:
    """The property behind the list above, over arbitrary text."""
    try:
        _, changes = validate(answer(option, value), {})
    except BadDecision:
        return
    # accepted: one word of harmless characters, not option-like, that sbatch reads back as is
    assert value and set(value) <= SAFE and not value.startswith("-")
    assert [c.value for c in changes] == [value]


# --------------------------------------------------------------- crafted scripts


def request(text: str, argv: list[str] | None = None, env: dict[str, str] | None = None) -> Request:
    return Request(
        SBATCH_TABLE.parse(argv or []), env or {}, directives.parse(text), script_path="job.sh", script_text=text
    )


def one_change(option: str, value: str) -> list:
    # validated against a request of 64 CPUs: harp only lowers --cpus-per-task, and what is
    # under test here is what the rewrite touches, not which changes harp-submit accepts
    return validate(answer(option, value), {"cpus_per_task": 64})[1]


def options_of(text: str) -> list[tuple[str, str | None]]:
    script = directives.parse(text)
    assert script.error is None, script.error
    return [(o.name, o.value) for o in script.options()]


def rewrite(text: str, option: str, value: str) -> str:
    out = apply(request(text), [], one_change(option, value))
    return out.script_text


CRAFTED = [
    # an option's value on the next directive line: that token is the one to edit
    ("#!/bin/bash\n#SBATCH -t\n#SBATCH 10\necho\n", "time", "20", "#!/bin/bash\n#SBATCH -t\n#SBATCH 20\necho\n"),
    # a look-alike inside a quoted value is text, not an option
    (
        "#!/bin/bash\n#SBATCH --comment='--time=99' --time=5\necho\n",
        "time",
        "30",
        "#!/bin/bash\n#SBATCH --comment='--time=99' --time=30\necho\n",
    ),
    (
        '#!/bin/bash\n#SBATCH -J "a --time=1" -t 5\necho\n',
        "time",
        "30",
        '#!/bin/bash\n#SBATCH -J "a --time=1" -t 30\necho\n',
    ),
    # after an unquoted # the rest of the line is a comment sbatch never reads
    (
        "#!/bin/bash\n#SBATCH -t 5 # --wrap=touch /tmp/pwned\necho\n",
        "time",
        "30",
        "#!/bin/bash\n#SBATCH -t 30 # --wrap=touch /tmp/pwned\necho\n",
    ),
    # a directive after the first command is ignored by sbatch: left alone, the new one goes above the command
    (
        "#!/bin/bash\n#SBATCH -J x\necho\n#SBATCH --time=1\n",
        "time",
        "30",
        "#!/bin/bash\n#SBATCH -J x\n#SBATCH --time=30\necho\n#SBATCH --time=1\n",
    ),
    # the effective (last) setting is the one edited; earlier ones stay as written
    (
        "#!/bin/bash\n#SBATCH -t 5\n#SBATCH --time=7\necho\n",
        "time",
        "30",
        "#!/bin/bash\n#SBATCH -t 5\n#SBATCH --time=30\necho\n",
    ),
    # clustered short options keep their cluster
    ("#!/bin/bash\n#SBATCH -Ht5\necho\n", "time", "30", "#!/bin/bash\n#SBATCH -Ht30\necho\n"),
    # escaped value: rewritten without the escapes it no longer needs
    ("#!/bin/bash\n#SBATCH --time=\\5\necho\n", "time", "30", "#!/bin/bash\n#SBATCH --time=30\necho\n"),
    # a payload in the job name stays where it is, byte for byte
    (
        "#!/bin/bash\n#SBATCH -J '$(touch /tmp/pwned); touch /tmp/pwned2'\n#SBATCH -p short\necho\n",
        "partition",
        "long",
        "#!/bin/bash\n#SBATCH -J '$(touch /tmp/pwned); touch /tmp/pwned2'\n#SBATCH -p long\necho\n",
    ),
]


@pytest.mark.parametrize("text, option, value, expected", CRAFTED)
def test_crafted_scripts_get_exactly_one_value_changed(text: str, option: str, value: str, expected: str) -> None:
    got = rewrite(text, option, value)
    assert got == expected
    before, after = options_of(text), options_of(got)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(after) in (len(before), len(before) + 1)
    assert len(changed) <= 1 and all(b == (option, value) for _, b in changed)


def test_a_directive_sbatch_would_stop_at_makes_harp_step_aside() -> None:
    """An escaped blank ends the argument in sbatch, leaving ``/tmp/pwned`` a stray word.

    sbatch rejects that block; harp must not "fix" it into something that
    parses: it marks the script as an error and submits it untouched.
    """
    script = directives.parse("#!/bin/bash\n#SBATCH --wrap=touch\\ /tmp/pwned -t 1\necho\n")
    assert script.error is not None and "invalid directive" in script.error


@pytest.mark.parametrize(
    "text",
    [
        "#!/bin/bash\n#SBATCH --time=1 --wrap='touch /tmp/pwned'\necho\n",
        "#!/bin/bash\n#SBATCH --wrap=\"touch /tmp/pwned\" -t 1\necho\n",
    ],
)
def test_a_wrap_hidden_in_the_script_is_seen_and_kept_as_the_only_wrap(text: str) -> None:
    """harp reads ``--wrap`` in a directive as sbatch does; its edit adds no second one."""
    script = directives.parse(text)
    names = [o.name for o in script.options()]
    assert "wrap" in names and names.count("wrap") == 1
    got = rewrite(text, "time", "30")
    assert [n for n, _ in options_of(got)].count("wrap") == 1
    assert dict(options_of(got))["wrap"] == dict(options_of(text))["wrap"]


# hypothesis: generated directive blocks -------------------------------------------

SPACE = st.sampled_from([" ", "  ", "\t", " \t ", "\x0b", "\x0c"])
WORD = st.text(alphabet=string.ascii_letters + string.digits + "-_/.:=$()`;|&<>*~'\"\\# ", min_size=1, max_size=12)


def quoted(s: str) -> str:
    if not s or any(c in s for c in " \t\"'\\#"):
        return "'" + s.replace("'", "") + "'" if "'" not in s else '"' + s.replace('"', "").replace("\\", "") + '"'
    return s


@st.composite
def option_token(draw) -> str:
    kind = draw(st.sampled_from(["time", "mem", "cpus", "part", "name", "comment", "output", "hold", "exclusive"]))
    sep = draw(st.sampled_from(["=", " "]))
    if kind == "time":
        v = draw(st.sampled_from(["5", "10", "1:00:00", "0-02:00:00", "30:00"]))
        flag = draw(st.sampled_from(["--time", "-t"]))
    elif kind == "mem":
        v = draw(st.sampled_from(["100", "1G", "500M", "2048K"]))
        flag = draw(st.sampled_from(["--mem", "--mem-per-cpu"]))
    elif kind == "cpus":
        v = draw(st.sampled_from(["1", "2", "4"]))
        flag = draw(st.sampled_from(["--cpus-per-task", "-c"]))
    elif kind == "part":
        v = draw(st.sampled_from(["short", "long", "tiny"]))
        flag = draw(st.sampled_from(["--partition", "-p"]))
    elif kind in ("name", "comment", "output"):
        v = quoted(draw(WORD))
        flag = {
            "name": draw(st.sampled_from(["-J", "--job-name"])),
            "comment": "--comment",
            "output": draw(st.sampled_from(["-o", "--output"])),
        }[kind]
    else:
        return draw(st.sampled_from(["-H", "--hold", "--exclusive"]))
    if flag.startswith("--"):
        return f"{flag}{sep}{v}"
    return f"{flag}{' ' if sep == ' ' else ''}{v}"


@st.composite
def scripts(draw) -> str:
    lines = ["#!/bin/bash\n"]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["directive", "directive", "directive", "comment", "blank", "slurm"]))
        if kind == "comment":
            lines.append(
                "# " + draw(st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), max_size=20)) + "\n"
            )
        elif kind == "blank":
            lines.append(draw(st.sampled_from(["\n", "   \n", "\t\n"])))
        else:
            toks = draw(st.lists(option_token(), min_size=1, max_size=3))
            sp = draw(SPACE)
            tail = draw(st.sampled_from(["", " # trailing --wrap=touch /tmp/pwned", "\t#x"]))
            prefix = "#SLURM" if kind == "slurm" else "#SBATCH"
            lines.append(prefix + sp + sp.join(toks) + tail + "\n")
    lines.append(draw(st.sampled_from(["echo hi\n", "srun ./a.out '$(touch /tmp/pwned)'\n", "true; #SBATCH -t 1\n"])))
    lines += draw(st.lists(st.sampled_from(["#SBATCH --time=1\n", "#SBATCH --wrap=x\n", "echo\n"]), max_size=2))
    return "".join(lines)


CHANGES = st.one_of(
    st.tuples(st.just("time"), st.sampled_from(["7", "00:45:00", "1-00:00:00"])),
    st.tuples(st.just("mem"), st.sampled_from(["300M", "4G"])),
    st.tuples(st.just("mem-per-cpu"), st.sampled_from(["700M"])),
    st.tuples(st.just("cpus-per-task"), st.sampled_from(["3", "8"])),
    st.tuples(st.just("partition"), st.sampled_from(["long", "gpu"])),
    st.tuples(st.just("gres"), st.sampled_from(["gpu:a100:2"])),
)


def _family(name: str) -> tuple[str, ...]:
    return MEMORY_OPTIONS if name in MEMORY_OPTIONS else (name,)


@FUZZ
@given(text=scripts(), ch=CHANGES)
def test_rewrite_changes_one_value_and_nothing_else_sbatch_reads(text: str, ch: tuple[str, str]) -> None:
    option, value = ch
    script = directives.parse(text)
    assume(script.error is None and not script.hetjob)
    req = request(text)
    assume(req.invalid() is None)
    try:
        out = apply(req, [], one_change(option, value))
    except RewriteError:
        return  # refused: the user's script goes to sbatch unchanged, which is safe
    new_text = out.script_text
    assert new_text is not None
    before, after = options_of(text), options_of(new_text)
    fam = _family(option)
    # what sbatch reads: the same options in the same order, outside the changed family
    assert [o for o in before if o[0] not in fam] == [o for o in after if o[0] not in fam]
    # and the changed family's effective value is the decision, spelled as the decision
    eff = [o for o in after if o[0] in fam][-1]
    assert eff == (option, value)
    # the family has as many settings as before (edited in place) or one more (a new line)
    n_before = sum(o[0] in fam for o in before)
    n_after = sum(o[0] in fam for o in after)
    assert n_after == n_before or (n_before == 0 and n_after == 1)
    # lines: all kept except one edited, or one inserted inside the directive block
    old_lines, new_lines = directives.split_lines(text), directives.split_lines(new_text)
    if len(new_lines) == len(old_lines):
        assert sum(a != b for a, b in zip(old_lines, new_lines)) <= 2  # value on a continuation line: 2
    else:
        assert len(new_lines) == len(old_lines) + 1
        at = next(i for i, (a, b) in enumerate(zip(old_lines + [""], new_lines)) if a != b)
        assert new_lines[at] == f"#SBATCH --{option}={value}\n"
        assert new_lines[:at] + new_lines[at + 1 :] == old_lines
        assert at <= directives.parse(text).header_end  # above the first command, where sbatch reads it
    # whatever was after the first command is untouched, byte for byte
    hdr = script.header_end
    assert "".join(old_lines[hdr:]) == "".join(new_lines[len(new_lines) - len(old_lines) + hdr :])


@FUZZ
@given(text=scripts(), ch=CHANGES, cli=st.lists(option_token(), max_size=3))
def test_command_line_rewrite_keeps_every_other_word(text: str, ch: tuple[str, str], cli: list[str]) -> None:
    argv = [w for tok in cli for w in tok.split(" ", 1)] + ["job.sh", "arg; touch /tmp/pwned"]
    parsed = SBATCH_TABLE.parse(argv)
    assume(parsed.end == len(argv) - 2)
    script = directives.parse(text)
    assume(script.error is None and not script.hetjob)
    req = Request(parsed, {}, script, script_path="job.sh", script_text=text)
    assume(req.invalid() is None)
    option, value = ch
    try:
        out = apply(req, argv, one_change(option, value))
    except RewriteError:
        return
    assert out.argv[-2:] == ["job.sh", "arg; touch /tmp/pwned"]  # the script and its arguments stay
    after = SBATCH_TABLE.parse(out.argv)
    assert after.end == len(out.argv) - 2  # still the same script with the same arguments
    fam = _family(option)
    if out.argv_changed:
        assert len(out.argv) == len(argv) and not out.script_changed
        diff = [(a, b) for a, b in zip(argv, out.argv) if a != b]
        assert 1 <= len(diff) <= 2  # the value, and the option's name when --mem-per-cpu became --mem
        pairs = lambda parsed: [(o.name, o.value) for o in parsed.options]  # noqa: E731
        assert [o for o in pairs(parsed) if o[0] not in fam] == [o for o in pairs(after) if o[0] not in fam]
        assert [o for o in pairs(after) if o[0] in fam][-1] == (option, value)


def test_memory_values_written_are_the_values_decided() -> None:
    """Round trips the rewrite relies on: harp's formatting reads back as the same amount."""
    for mb in (1, 100, 1023, 1024, 1536, 4096, 10**6, 1024 * 1024 * 3):
        assert units.parse_mem(units.format_mem(mb)) == mb
    for s in (60, 3600, 86400 + 60, 10 * 86400):
        assert units.parse_time(units.format_time(s)) == s


def test_apply_leaves_the_users_request_as_it_was() -> None:
    """Found by bench/fuzz_directives.py: apply() edited the Request's own Script in place,
    so a second use of the request (a fallback, a second decision) saw harp's edit as the user's."""
    text = "#!/bin/bash\n#SBATCH -t\n#SBATCH 10\n#SBATCH -p short\necho\n"
    req = request(text)
    apply(req, [], one_change("time", "00:45:00"))
    assert req.script.render() == text and req.script_text == text
    second = apply(req, [], one_change("partition", "long"))
    assert second.script_text == "#!/bin/bash\n#SBATCH -t\n#SBATCH 10\n#SBATCH -p long\necho\n"
