"""Which Python function a job library's job runs, read without running anything.

submitit (Meta's job library) submits every function the same way: a
``.submission_file_<uuid>.sh`` script whose one command is ``srun … python
-u -m submitit.core._submit FOLDER``, and job name ``submitit`` unless the
user names it.  By its commands and name, every function is one program to
harp, and a 400 MB function is sized from a 150 MB one's runs (#51).  The
function is in the pickle submitit writes just before it calls sbatch
(``FOLDER/<uuid>.pkl``, renamed ``<jobid>_submitted.pkl`` once sbatch
answers), as a reference ``module.name`` (an importable function, a callable
object's class, ``functools.partial``'s function) or, for a function of the
user's ``__main__``, cloudpickle's copy of it that carries its
``__qualname__``.

Read here, in harp-submit, as the submitting user, with ``pickletools.genops``:
it lists the pickle's opcodes and never builds an object, so no code of the
file runs (harpd, as root, never opens a user's pickle at all).  Bounded: at
most ``MAX_BYTES`` of the file and ``MAX_OPS`` opcodes; anything unreadable
is no function (None), and harp falls back to the job name.
"""

from __future__ import annotations

import os

MAX_BYTES = 1 << 20
MAX_OPS = 20000
#: the longest ``module:qualname`` sent (``harpd.protocol.JobRequest.function``)
MAX_NAME = 256
_HEX = frozenset("0123456789abcdef")
SUBMITIT_MODULE = "submitit.core._submit"
#: modules whose globals wrap the function (partial) or rebuild it (cloudpickle): look past them
_WRAPPERS = frozenset({"functools", "cloudpickle", "cloudpickle.cloudpickle", "copyreg", "builtins", "_codecs"})
_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING"})


def _is_uuid(text: str) -> bool:
    return len(text) == 32 and set(text) <= _HEX


def _is_submission(name: str) -> bool:
    """submitit's submission script ``.submission_file_<uuid>.sh`` (its uuid is not the pickle's)."""
    return name.startswith(".submission_file_") and name.endswith(".sh") and _is_uuid(name[17:-3])


def _is_pickle(name: str) -> bool:
    """The pickle of a function submitit has not submitted yet: ``<uuid>.pkl``."""
    return name.endswith(".pkl") and _is_uuid(name[:-4])


def is_submitit(script_name: str | None, commands: list[str]) -> bool:
    """Whether the job is submitit's: its submission script running ``-m submitit.core._submit``."""
    return bool(script_name and _is_submission(script_name)) and any(SUBMITIT_MODULE in c for c in commands)


def submitit_function(script_path: str | None, commands: list[str]) -> str | None:
    """``module:qualname`` of the function a submitit job runs; None when not submitit's or unreadable."""
    if not script_path or not is_submitit(os.path.basename(script_path), commands):
        return None
    name = _function_in_folder(script_path)
    return name if name is not None and len(name) <= MAX_NAME else None  # what harpd's protocol takes


def _function_in_folder(script_path: str) -> str | None:
    """The function in the newest ``<uuid>.pkl`` beside the submission script: the one submitit wrote just
    before this sbatch (it renames each pickle once its sbatch answered).  A folder of more than 10,000
    entries is not listed (harp-submit's overhead); the job name stands for the function then."""
    folder = os.path.dirname(os.path.abspath(script_path))
    try:
        newest: tuple[float, str] | None = None
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n > 10000:
                    return None
                if _is_pickle(entry.name) and entry.is_file(follow_symlinks=False):
                    t = entry.stat(follow_symlinks=False).st_mtime
                    if newest is None or t > newest[0]:
                        newest = (t, entry.path)
        if newest is None:
            return None
        with open(newest[1], "rb") as f:
            data = f.read(MAX_BYTES)
    except OSError:
        return None
    return function_of_pickle(data)


def function_of_pickle(data: bytes) -> str | None:
    """The ``function`` of a pickled ``DelayedSubmission``, from its opcodes alone; None when not found.

    Never raises, never runs the pickle: a truncated or hostile file is no function.
    (``pickletools`` is imported here: it loads ``re``, which harp-submit's start-up must not.)
    """
    import io
    import pickletools

    strings: list[str] = []
    seen_key = False
    after_name: str | None = None
    module: str | None = None
    by_value = False  # cloudpickle rebuilds the function: only its __qualname__ names it
    pushed = _Strings()
    try:
        for n, (op, arg, _pos) in enumerate(pickletools.genops(io.BytesIO(data))):
            if n > MAX_OPS:
                return None
            name = op.name
            if pushed.memoises(name, arg):
                continue
            text = pushed.text(name, arg)
            if text is not None:
                if not seen_key:
                    seen_key = text == "function"
                    continue
                if after_name == "__qualname__":
                    return f"{module or '__main__'}:{text}" if _clean(text) else None
                if after_name == "__name__" and module is None:
                    module = text  # the copied function's globals: its module
                after_name = text if text in ("__qualname__", "__name__") else None
                strings.append(text)
            elif by_value:
                after_name = None
                continue
            elif name == "GLOBAL" and seen_key and isinstance(arg, str):
                mod, _, qual = arg.partition(" ")
                if mod.split(".")[0] not in _WRAPPERS:
                    return f"{mod}:{qual}" if _clean(mod) and _clean(qual) else None
                by_value = mod.split(".")[0] == "cloudpickle"
            elif name == "STACK_GLOBAL" and seen_key and len(strings) >= 2:
                mod, qual = strings[-2], strings[-1]
                if mod.split(".")[0] not in _WRAPPERS:
                    return f"{mod}:{qual}" if _clean(mod) and _clean(qual) else None
                by_value = mod.split(".")[0] == "cloudpickle"
                after_name = None
            else:
                after_name = None
    except Exception:  # noqa: BLE001 - genops raises what a broken file makes it (ValueError, struct.error, …)
        return None
    return None


class _Strings:
    """The strings a pickle's opcodes push, with its memo: a later GET pushes a memoised string again."""

    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.memo_next = 0
        self.last: str | None = None  # the string the previous opcode pushed, for a MEMOIZE/PUT after it

    def memoises(self, name: str, arg: object) -> bool:
        """Whether the opcode only memoised what the previous one pushed (MEMOIZE, PUT): nothing pushed."""
        if name == "MEMOIZE":
            if self.last is not None:
                self.memo[self.memo_next] = self.last
            self.memo_next += 1
            return True
        if name in ("BINPUT", "LONG_BINPUT", "PUT") and isinstance(arg, int):
            if self.last is not None:
                self.memo[arg] = self.last
            return True
        return False

    def text(self, name: str, arg: object) -> str | None:
        """The string this opcode pushes (a literal, or a memoised one got again), else None."""
        text: str | None = None
        if name in _STRINGS and isinstance(arg, (str, bytes)):
            text = arg if isinstance(arg, str) else arg.decode("latin-1")
        elif name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, int):
            text = self.memo.get(arg)
        self.last = text
        return text


def _clean(text: str) -> bool:
    """A dotted Python name (what a module or qualname is), short: nothing else is sent to harpd."""
    return 0 < len(text) <= 200 and all(
        part.isidentifier() or part in ("<locals>", "<lambda>") for part in text.split(".")
    )
