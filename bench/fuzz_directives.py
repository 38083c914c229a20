"""Fuzz harp-submit's script reading and rewriting (directives, units, rewrite); target: no failure.

Every input is a batch script as bytes (any bytes: harp-submit reads users'
files).  For each one:

* ``directives.parse`` must not raise and must render the exact text back;
* every value a resource option has in it goes through the unit parsers,
  which may only raise ValueError;
* when the script parses and sbatch would accept its values, a decision
  changing ``--time`` (then ``--mem``, ``--partition``) is applied: the result
  must parse, say exactly the decided value, and keep every other option
  sbatch reads unchanged (no smuggled or lost option);
* a value from a lying daemon taken from the input is either refused or
  safe (one word of harmless characters, not starting with ``-``).

Coverage-guided with atheris when installed (pip install atheris), else a
seeded random mutator; the count of inputs tried is the first figure.

    python bench/fuzz_directives.py [--runs 100000] [--engine auto|atheris|random] [--seed 1]
"""

# bench: slow
# bench: timeout=900

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fuzzing

SEEDS = [
    b"#!/bin/bash\n#SBATCH --time=10 -c 2 # small\n#SBATCH --mem-per-cpu=500M\necho hi\n",
    b"#!/bin/bash\n#SBATCH -t\n#SBATCH 10\n#SBATCH -p short\nsrun ./a.out\n",
    b"#!/bin/sh\n#SBATCH -J '$(touch /tmp/pwned); touch /tmp/x' --comment=\"a b\"\n#SBATCH -Ht5\necho\n",
    b"#!/bin/bash\n#SLURM --mem=1G\n\n# comment\n#SBATCH --gres=gpu:a100:2 --time=1-00:00:00\ntrue\n#SBATCH -t 1\n",
    b"#!/bin/bash\n#SBATCH --time=\\5 -o out.%j\n#SBATCH --wrap='id'\necho\n",
    b"#!/bin/bash\r\n#SBATCH -t 5\r\necho\r\n",
    b"#!/bin/bash\n#SBATCH hetjob\n#SBATCH -t 5\necho\n",
    b"#!/bin/bash\n#SBATCH --mem=4G --mem-per-cpu=1G\necho\n",
    b"#!/bin/bash\n#SBATCH -N 2-4 --ntasks-per-node=8 --cpus-per-task=3\n#HARP dnn model=llama\necho\n",
]


def load():
    from harp_submit import directives, units
    from harp_submit.decision import BadDecision, validate
    from harp_submit.request import MEMORY_OPTIONS, Request
    from harp_submit.rewrite import RewriteError, apply
    from harp_submit.sbatch_options import SBATCH_TABLE

    limits = {"partition": None, "max_time_s": None, "max_mem_mb": None, "max_cpus": None}
    parsers = (units.parse_time, units.parse_mem, units.parse_int, units.parse_nodes)
    safe = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-.,=/+%@[]")

    def decided(option: str, value: str):
        answer = {"ok": True, "decision": {"changes": [{"option": option, "value": value}], "limits": limits}}
        return validate(answer, {})[1]

    def pairs(script) -> list[tuple[str, str | None]]:
        return [(o.name, o.value) for o in script.options()]

    def check(data: bytes) -> None:
        text = data.decode("utf-8", "surrogateescape")
        script = directives.parse(text)
        assert script.render() == text, "render is not lossless"
        assert script.error is None or "\n" not in script.error
        for tok in script.tokens:
            for fn in parsers:
                try:
                    fn(tok.value)
                except ValueError:
                    pass
        # a lying daemon: a value made of the input's first line
        hostile = text.split("\n", 1)[0][:64]
        try:
            ok = decided("partition", hostile)
        except BadDecision:
            pass
        else:
            assert hostile and set(hostile) <= safe and not hostile.startswith("-"), repr(hostile)
            assert [c.value for c in ok] == [hostile]
        if script.error or script.hetjob:
            return
        req = Request(SBATCH_TABLE.parse([]), {}, script, script_path="job.sh", script_text=text)
        if req.invalid():
            return
        for option, value in (("time", "00:45:00"), ("mem", "3G"), ("partition", "long")):
            try:
                out = apply(req, [], decided(option, value))
            except RewriteError:
                continue
            after = directives.parse(out.script_text)
            assert after.error is None, after.error
            fam = MEMORY_OPTIONS if option in MEMORY_OPTIONS else (option,)
            before_other = [o for o in pairs(script) if o[0] not in fam]
            after_other = [o for o in pairs(after) if o[0] not in fam]
            assert before_other == after_other, f"--{option}: other options changed"
            assert [o for o in pairs(after) if o[0] in fam][-1] == (option, value)
            assert "".join(directives.split_lines(text)[script.header_end :]) in out.script_text

    return check


if __name__ == "__main__":
    sys.exit(
        _fuzzing.main("fuzz_directives", load, SEEDS, default_runs=100_000, instrument=["harp_submit"], max_len=4096)
    )
