"""The few harpd.toml keys the client needs, read without importing tomllib.

tomllib's import costs more than a whole round trip to harpd, and harpd.toml
is plainly written (tables, ``key = value`` lines, comments, quoted
strings, numbers, one-line lists of strings).  ``values`` reads such a file
itself and hands anything else that could bear on the answer (dotted keys,
inline tables, multi-line or escaped strings) to tomllib, so both readers
always agree (tests/unit/submit/test_client.py checks it).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

UNSURE = object()

Key = tuple[str, str]  # (table, key)


def values(text: str, wanted: Collection[Key]) -> dict[Key, Any]:
    """The ``wanted`` keys present in ``text``; ValueError (one phrase) for a file harpd would refuse."""
    found = simple_values(text, wanted)
    if found is not UNSURE:
        return found  # type: ignore[return-value]
    import tomllib  # exact, but slow to import: only for files the simple reader cannot vouch for

    try:
        data = tomllib.loads(text)
    except ValueError:  # TOMLDecodeError
        raise ValueError("not valid TOML") from None
    out: dict[Key, Any] = {}
    for table, key in wanted:
        section = data.get(table, {})
        if not isinstance(section, dict):
            raise ValueError(f"its [{table}] is not a table")
        if key in section:
            out[(table, key)] = section[key]
    return out


def simple_values(text: str, wanted: Collection[Key]) -> dict[Key, Any] | object:
    """``values`` for a plainly written file, or UNSURE."""
    tables = {t for t, _ in wanted}
    table = ""
    found: dict[Key, Any] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if '"""' in line or "'''" in line:
            return UNSURE
        if line.startswith("["):
            if line.startswith("[["):
                return UNSURE
            end = line.find("]")
            rest = line[end + 1 :].strip()
            if end < 0 or (rest and not rest.startswith("#")):
                return UNSURE
            table = line[1:end].strip()
            if "." in table or "\"" in table or "'" in table:
                if table.split(".", 1)[0].strip(" \"'") in tables:
                    return UNSURE
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq:
            return UNSURE
        if "." in key or key.startswith(('"', "'")) or (table == "" and key in tables):
            return UNSURE  # dotted, quoted or inline-table keys: tomllib knows best
        if (table, key) not in wanted:
            continue
        parsed = _value(value.strip())
        if parsed is UNSURE or (table, key) in found:
            return UNSURE  # a duplicate key: invalid TOML, let tomllib say so
        found[(table, key)] = parsed
    return found


def _value(text: str) -> Any:
    """A quoted string, a decimal number or a one-line list of quoted strings; else UNSURE."""
    if text[:1] == "[":
        close = text.find("]")
        if close < 0 or (text[close + 1 :].strip() and not text[close + 1 :].strip().startswith("#")):
            return UNSURE
        items: list[str] = []
        rest = text[1:close].strip()
        while rest:
            item, rest = _string(rest)
            if item is UNSURE:
                return UNSURE
            items.append(item)
            rest = rest.strip()
            if rest.startswith(","):
                rest = rest[1:].strip()
            elif rest:
                return UNSURE
        return items
    if text[:1] in "\"'":
        item, tail = _string(text)
        tail = tail.strip()
        return item if not tail or tail.startswith("#") else UNSURE
    number, _, tail = text.partition("#")
    number = number.strip()
    return int(number) if number.isdigit() and number.isascii() and (number == "0" or number[0] != "0") else UNSURE


def _string(text: str) -> tuple[Any, str]:
    if len(text) < 2 or text[0] not in "\"'":
        return UNSURE, ""
    q = text[0]
    close = text.find(q, 1)
    if close < 0:
        return UNSURE, ""
    inner = text[1:close]
    if q == '"' and "\\" in inner:
        return UNSURE, ""
    return inner, text[close + 1 :]
