"""Lossless reading and editing of a batch script's ``#SBATCH`` lines.

A script is kept as its exact lines (line terminators included), so rendering
an unedited script gives back the same bytes; an edit replaces only the
characters of the tokens it targets, or inserts a whole new line.

What counts as a directive, and how a directive line splits into arguments,
follows sbatch 22.05 (src/sbatch/opt.c ``_opt_batch_script`` and
``_get_argument``) so harp sees the same options sbatch will:

- lines are split on ``\\n`` only; a ``\\r`` stays in the line (sbatch refuses
  scripts with DOS line breaks, but we still round-trip them);
- a directive line starts exactly with ``#SBATCH`` (or the old ``#SLURM``) at
  column 0; parsing stops at the first line whose first non-blank character is
  not ``#`` (the first command);
- arguments are separated by C ``isspace`` characters, may be quoted with
  ``'`` or ``"``, ``\\`` escapes the next character (but an escaped blank still
  ends the argument), an unquoted ``#`` starts a comment, and an empty argument
  (``""``) ends the line;
- the arguments of all directive lines form one argv that getopt_long reads,
  so an option's value may even sit on the next directive line.

Scripts are handled as ``str`` decoded with ``surrogateescape``: lossless for
any bytes, and non-UTF-8 comments survive untouched.
"""

from __future__ import annotations

from .sbatch_options import SBATCH_TABLE, GetoptError, ParsedArgs, ParsedOption

PREFIXES = ("#SBATCH", "#SLURM")
_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, not str.isspace()


class DirectiveError(ValueError):
    """A directive block sbatch itself rejects (it prints the reason)."""


class Token:
    """One argument of a directive line: its raw span and its unescaped value."""

    __slots__ = ("line", "start", "end", "value")

    def __init__(self, line: int, start: int, end: int, value: str):
        self.line = line  # index into Script.lines
        self.start = start  # span of the raw text within the line
        self.end = end
        self.value = value

    def __repr__(self) -> str:
        return f"Token({self.line}, {self.start}, {self.end}, {self.value!r})"

    def raw(self, script: Script) -> str:
        return script.lines[self.line][self.start : self.end]


class Script:
    """A batch script split into lines, with its directive block understood."""

    __slots__ = ("lines", "header_end", "directive_lines", "tokens", "parsed", "error", "hetjob")

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.header_end = len(lines)  # index of the first command line (len(lines) if none)
        self.directive_lines: list[int] = []
        self.tokens: list[Token] = []
        self.parsed: ParsedArgs | None = None  # getopt over the tokens' values
        self.error: str | None = None  # set when sbatch would reject the directives
        self.hetjob = False  # a het job separator: harp leaves such scripts alone

    def render(self) -> str:
        return "".join(self.lines)

    def options(self) -> list[ParsedOption]:
        return self.parsed.options if self.parsed else []


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` keeping terminators; ``"".join`` gives the text back."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def line_body(line: str) -> str:
    return line[:-1] if line.endswith("\n") else line


def directive_prefix(body: str) -> str | None:
    for p in PREFIXES:
        if body.startswith(p):
            return p
    return None


def is_command(body: str) -> bool:
    """sbatch's test for the line that ends the directive block."""
    for ch in body:
        if ch in _SPACE:
            continue
        return ch != "#"
    return False


def get_argument(body: str, pos: int) -> tuple[str | None, int, int]:
    """sbatch's ``_get_argument``: (value or None, raw start, raw end).

    None means "no more arguments on this line" (end of line, a comment, or
    an empty argument such as ``""``, which makes sbatch skip the rest).
    """
    n = len(body)
    while pos < n and body[pos] in _SPACE:
        pos += 1
    start = pos
    if pos < n and body[pos] == ":":
        raise DirectiveError("unexpected ':' in a directive")
    if pos >= n:
        return None, start, pos
    out: list[str] = []
    quote = ""
    escape = False
    while pos < n and (quote or body[pos] not in _SPACE) and body[pos] != "\n":
        ch = body[pos]
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            pos += 1
            continue
        elif quote:
            if ch == quote:
                quote = ""
                pos += 1
                continue
        elif ch in "\"'":
            quote = ch
            pos += 1
            continue
        elif ch == "#":
            break
        out.append(ch)
        pos += 1
    if quote:
        raise DirectiveError(f"unmatched {quote} in a directive")
    if not out:
        return None, start, pos
    return "".join(out), start, pos


def tokenize_line(body: str, start: int) -> list[tuple[str, int, int]]:
    """All arguments of one directive line after its prefix."""
    out: list[tuple[str, int, int]] = []
    pos = start
    while True:
        value, s, e = get_argument(body, pos)
        if value is None:
            return out
        out.append((value, s, e))
        pos = e


def parse(text: str) -> Script:
    """Read a script's directive block the way sbatch does.

    Never raises: problems sbatch would report land in ``Script.error`` so the
    caller can hand the script to sbatch untouched.
    """
    lines = split_lines(text)
    script = Script(lines)
    for i, line in enumerate(lines):
        body = line_body(line)
        prefix = directive_prefix(body)
        if prefix is None:
            if is_command(body):
                script.header_end = i
                break
            continue
        script.directive_lines.append(i)
        low = body.lower()
        if "hetjob" in low or "packjob" in low:
            script.hetjob = True
        if script.error:
            continue
        try:
            for value, s, e in tokenize_line(body, len(prefix)):
                script.tokens.append(Token(i, s, e, value))
        except DirectiveError as exc:
            script.error = f"line {i + 1}: {exc}"
    if script.error is None:
        try:
            parsed = SBATCH_TABLE.parse([t.value for t in script.tokens])
        except GetoptError as exc:
            script.error = f"invalid directive: {exc}"
        else:
            if parsed.end < len(script.tokens):
                bad = script.tokens[parsed.end]
                script.error = f"line {bad.line + 1}: invalid directive {bad.value!r}"
            else:
                script.parsed = parsed
    return script


# --- editing -------------------------------------------------------------------

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-.,=/+%@[]")


def is_safe_value(value: str) -> bool:
    """Whether a value can be written into a directive or argv without quoting."""
    return bool(value) and all(ch in _SAFE for ch in value)


def _plain(raw: str) -> bool:
    """A raw token with no quoting or escapes: its text is its value."""
    return not any(ch in raw for ch in "\"'\\#")


def replace_option(script: Script, opt: ParsedOption, name: str, value: str) -> None:
    """Point the directive ``opt`` at ``--name=value``, touching only its tokens.

    When the option keeps its name, the user's spelling (``-t``, ``--time``,
    ``--tim``, ``-Hc``) and everything around it stay as they were; only the
    value's characters change.  Renaming (``--mem-per-cpu`` to ``--mem``)
    rewrites the option's own token too.  ``script`` is stale afterwards:
    parse its rendering again before the next edit.
    """
    if not is_safe_value(value):
        raise ValueError(f"unsafe value {value!r}")
    tok = script.tokens[opt.index]
    same = opt.name == name
    edits: list[tuple[Token, str]] = []
    if opt.value_index is not None:
        edits.append((script.tokens[opt.value_index], value))
        if not same:
            edits.append((tok, _with_lead(opt.cluster_lead(tok.value), f"--{name}")))
    else:
        if opt.value_start is None:
            raise ValueError(f"option {opt.spelled} has no value to replace")
        raw = tok.raw(script)
        if same:
            head = raw[: opt.value_start] if _plain(raw) else tok.value[: opt.value_start]
            new = head + value
        else:
            lead = opt.cluster_lead(tok.value[: opt.value_start])
            new = _with_lead(lead, f"--{name}={value}")
        edits.append((tok, new))
    # right to left, so that earlier spans on the same line stay valid
    for t, new in sorted(edits, key=lambda e: (e[0].line, e[0].start), reverse=True):
        line = script.lines[t.line]
        script.lines[t.line] = line[: t.start] + new + line[t.end :]


def _with_lead(lead: str, new: str) -> str:
    return f"{lead} {new}" if lead else new


def insert_directive(script: Script, name: str, value: str) -> int:
    """Add ``#SBATCH --name=value`` after the last directive (else after the shebang).

    Returns the new line's index.  The new line uses the script's own line
    ending (``\\r\\n`` when the line before it has one).  ``script`` is stale
    afterwards: parse its rendering again before the next edit.
    """
    if not is_safe_value(value):
        raise ValueError(f"unsafe value {value!r}")
    if script.directive_lines:
        at = script.directive_lines[-1] + 1
    elif script.lines and script.lines[0].startswith("#!"):
        at = 1
    else:
        at = 0
    ref = script.lines[at - 1] if at > 0 else (script.lines[0] if script.lines else "\n")
    eol = "\r\n" if ref.endswith("\r\n") else "\n"
    if at > 0 and not script.lines[at - 1].endswith("\n"):
        script.lines[at - 1] += eol
    script.lines.insert(at, f"#SBATCH --{name}={value}{eol}")
    return at
