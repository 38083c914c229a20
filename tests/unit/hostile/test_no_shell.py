"""No shell ever sees user data: every process harp starts gets an argv list.

Job names, scripts, partitions and paths all come from users; a single
``shell=True`` or ``os.system`` with one of them in the string would let a
job name like ``$(touch /tmp/pwned)`` run as harpd's user (root, on a site).
This test reads the source (AST, not grep, so a comment cannot fool it and a
call spread over lines cannot hide) and fails naming file and line.

The Lua cli_filter plugin is the one place that must go through a shell
(``io.popen``, Lua has nothing else): there every word is harp's own and
single-quoted, and user data travels in a temporary file; checked below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SOURCES = sorted(
    p
    for d in ("harp_submit", "harpd", "bench", "scripts")
    for p in (REPO / d).rglob("*.py")
    if "__pycache__" not in p.parts
)

# Calls that start a program; index of the argument that is the program / argv.
SPAWNERS: dict[str, int] = {
    "subprocess.run": 0,
    "subprocess.Popen": 0,
    "subprocess.call": 0,
    "subprocess.check_call": 0,
    "subprocess.check_output": 0,
    "os.execv": 1,
    "os.execve": 1,
    "os.execvp": 1,
    "os.execvpe": 1,
    "os.execl": 1,
    "os.execle": 1,
    "os.execlp": 1,
    "os.execlpe": 1,
    "os.spawnv": 2,
    "os.spawnve": 2,
    "os.spawnvp": 2,
    "os.spawnvpe": 2,
    "os.posix_spawn": 1,
    "os.posix_spawnp": 1,
    "asyncio.create_subprocess_exec": 0,
}
FORBIDDEN = {
    "os.system",
    "os.popen",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "asyncio.create_subprocess_shell",
    "commands.getoutput",
    "pty.spawn",
}


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local names of imported modules and functions: ``sp`` -> ``subprocess``, ``run`` -> ``subprocess.run``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _canonical(name: str, aliases: dict[str, str]) -> str:
    head, _, rest = name.partition(".")
    full = aliases.get(head, head)
    return f"{full}.{rest}" if rest else full


def _is_argv_list(node: ast.AST, assigned: dict[str, list[ast.AST]], depth: int = 0) -> bool:
    """Whether an expression is (statically) a list/tuple of words, never one string."""
    if depth > 5:
        return False
    if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_argv_list(node.left, assigned, depth + 1) or _is_argv_list(node.right, assigned, depth + 1)
    if isinstance(node, ast.Call) and dotted(node.func) in ("list", "tuple"):
        return True
    if isinstance(node, ast.Name):
        values = assigned.get(node.id)
        return bool(values) and all(_is_argv_list(v, assigned, depth + 1) for v in values)
    return False


def _assignments(func: ast.AST) -> dict[str, list[ast.AST]]:
    """Every value assigned to each name in a scope; parameters count by their annotation."""
    out: dict[str, list[ast.AST]] = {}
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
            ann = ast.unparse(a.annotation) if a.annotation is not None else ""
            # ``argv: list[str]`` / ``Sequence[str]``: a list by contract (a str would fail type checks)
            if re.match(r"^(list|tuple|Sequence|typing\.Sequence|collections\.abc\.Sequence)\[str", ann):
                out.setdefault(a.arg, []).append(ast.List(elts=[], ctx=ast.Load()))
            else:
                out.setdefault(a.arg, []).append(ast.Constant(value=None))
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out.setdefault(node.target.id, []).append(node.value)
    return out


def _scopes(tree: ast.Module):
    """(scope node, the calls whose innermost enclosing scope it is): the module and every function."""
    owner: dict[ast.Call, ast.AST] = {}

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
            if isinstance(child, ast.Call):
                owner[child] = scope
            visit(child, inner)

    visit(tree, tree)
    by_scope: dict[ast.AST, list[ast.Call]] = {}
    for call, scope in owner.items():
        by_scope.setdefault(scope, []).append(call)
    yield from by_scope.items()


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = _aliases(tree)
    found: set[str] = set()
    for scope, calls in _scopes(tree):
        assigned = _assignments(scope)
        for call in calls:
            name = dotted(call.func)
            full = _canonical(name, aliases) if name else None
            where = f"{path.relative_to(REPO)}:{call.lineno}"
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.add(f"{where}: shell={ast.unparse(kw.value)}")
            if full in FORBIDDEN:
                found.add(f"{where}: {full}() runs a shell")
            if full in SPAWNERS:
                i = SPAWNERS[full]
                arg = (
                    call.args[i]
                    if len(call.args) > i
                    else next((k.value for k in call.keywords if k.arg in ("args", "argv")), None)
                )
                if full.startswith("os.execl") or full.startswith("os.spawnl"):
                    continue  # the l-variants take words as separate arguments
                if arg is None or not _is_argv_list(arg, assigned):
                    found.add(
                        f"{where}: {full}() not given a visible argv list ({ast.unparse(arg) if arg else 'none'})"
                    )
    return sorted(found)


def test_the_scan_covers_the_code_that_starts_processes() -> None:
    names = {p.relative_to(REPO).as_posix() for p in SOURCES}
    assert "harp_submit/cli.py" in names and "harpd/slurm/cli_backend.py" in names
    spawning = [p for p in SOURCES if re.search(r"subprocess\.|posix_spawn|os\.exec", p.read_text())]
    assert len(spawning) >= 2


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_shell_and_argv_lists_only(path: Path) -> None:
    assert violations(path) == []


def test_the_checker_catches_what_it_is_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os, subprocess as sp\nfrom subprocess import run\n"
        "def f(name):\n"
        "    sp.run(f'scancel {name}', shell=True)\n"
        "    os.system('echo ' + name)\n"
        "    run('sbatch ' + name)\n"
        "    cmd = ['ls', name]\n"
        "    sp.Popen(cmd)\n"
        "    os.popen(name)\n"
        "    os.execve(name, 'x y', {})\n"
    )
    global REPO  # noqa: PLW0603 (the checker reads the module's REPO)
    saved, REPO = REPO, tmp_path
    try:
        found = violations(bad)
    finally:
        REPO = saved
    text = "\n".join(found)
    assert "bad.py:4: shell=True" in text
    assert "bad.py:5: os.system()" in text
    assert "bad.py:6: subprocess.run() not given a visible argv list" in text
    assert "bad.py:9: os.popen()" in text
    assert "bad.py:10: os.execve()" in text
    assert ":8:" not in text  # a list assigned to a name is fine


LUA = sorted((REPO / "plugins").glob("*.lua"))
# single quotes, and each ' inside a word closed, escaped and reopened
SHELL_QUOTE = 'return "\'" .. word:gsub("\'", "\'\\\\\'\'") .. "\'"'


@pytest.mark.parametrize("path", LUA, ids=lambda p: p.name)
def test_lua_plugins_shell_only_quoted_harp_words(path: Path) -> None:
    """io.popen / os.execute only ever get ``helper_command(...)`` built from quoted words."""
    text = path.read_text()
    # drop whole-line comments (a "--" inside a string such as "--request" is code)
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    for m in re.finditer(r"\b(io\.popen|os\.execute)\s*\(", code):
        line = code[m.end() :].split("\n", 1)[0]
        assert "helper_command(" in line, f"{path.name}: {m.group(1)} without helper_command: {line.strip()}"
    if "helper_command" in code:
        body = code.split("local function helper_command", 1)[1].split("\nend", 1)[0]
        # every word appended goes through shell_quote; numbers only via %d
        assert body.count("words[#words + 1] = shell_quote(") == 2, body
        assert SHELL_QUOTE in code, "shell_quote changed: check it still quotes every word"
        for call in re.findall(r"helper_command\(\{([^}]*)\}\)", code):
            call = re.sub(r'string\.format\("%d",\s*\w+\)', "NUMBER", call)  # a job id as digits
            for arg in [a.strip() for a in call.split(",") if a.strip()]:
                # a literal, a number, or the temporary file write_temp made (os.tmpname)
                assert arg.startswith('"') or arg in ("path", "NUMBER"), (
                    f"{path.name}: helper argument {arg!r} is not harp's own"
                )
        for m in re.finditer(r"local path = (.*)", code):
            assert m.group(1).startswith(("write_temp(", "os.tmpname()")), f"{path.name}: path from {m.group(1)}"
