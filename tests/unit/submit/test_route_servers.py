"""Where harp-submit finds harpd: the local socket, then [client] servers / HARP_SERVERS."""

from __future__ import annotations

from pathlib import Path

import pytest

from harp_submit import route


@pytest.mark.parametrize(
    "text, want",
    [
        ("harp1:6820", ("harp1", 6820)),
        (" 10.0.0.5:1 ", ("10.0.0.5", 1)),
        ("[::1]:6820", ("::1", 6820)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_addresses_are_parsed(text: str, want: tuple[str, int]) -> None:
    assert route.parse_address(text) == want


@pytest.mark.parametrize(
    "text, needle",
    [
        ("harp1", "not HOST:PORT"),
        (":6820", "not HOST:PORT"),
        ("harp1:", "port must be"),
        ("harp1:0", "port must be"),
        ("harp1:70000", "port must be"),
        ("harp1:http", "port must be"),
        ("::1:6820", "IPv6 address in brackets"),
        ("", "not HOST:PORT"),
    ],
)
def test_bad_addresses_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        route.parse_address(text)


def _config(tmp_path: Path, body: str) -> str:
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(body)
    return str(cfg)


def test_servers_come_from_the_config_in_order(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        '[server]\nsocket = "/nowhere/h.sock"\n[client]\nservers = ["harp1:6820", "harp2:6821"]\n'
        'harpd_uid = 990\n[munge]\nsocket = "/m/sock"\n',
    )
    where, problems = route.choose({"HARP_CONFIG": cfg})
    assert problems == []
    assert where.servers == (("harp1", 6820), ("harp2", 6821))
    assert where.munge_socket == "/m/sock" and where.harpd_uids == (990,)
    # no socket on this host: only the servers are tried
    assert where.targets() == [("harp1", 6820), ("harp2", 6821)]


def test_harp_servers_overrides_the_config_and_an_existing_socket_goes_first(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[client]\nservers = ["harp1:6820"]\n')
    sock = tmp_path / "h.sock"
    sock.write_text("")
    where, problems = route.choose(
        {"HARP_CONFIG": cfg, "HARP_SERVERS": "a:1, b:2", "HARP_SOCKET": str(sock), "HARP_MUNGE_SOCKET": "/env/sock"}
    )
    assert problems == [] and where.munge_socket == "/env/sock"
    assert where.targets() == [str(sock), ("a", 1), ("b", 2)]


def test_without_servers_the_socket_is_tried_even_when_missing(tmp_path: Path) -> None:
    where, _ = route.choose({"HARP_CONFIG": _config(tmp_path, ""), "HARP_SOCKET": "/nowhere.sock"})
    assert where.targets() == ["/nowhere.sock"]


def test_bad_server_entries_are_said_and_skipped(tmp_path: Path) -> None:
    where, problems = route.choose({"HARP_CONFIG": _config(tmp_path, ""), "HARP_SERVERS": "harp1 harp2:6820 x:y"})
    assert where.servers == (("harp2", 6820),)
    assert len(problems) == 2 and all(p.startswith("HARP_SERVERS: ") and p.endswith("; skipped") for p in problems)
    where, problems = route.choose({"HARP_CONFIG": _config(tmp_path, '[client]\nservers = "harp1:6820"\n')})
    assert where.servers == () and problems == ['[client] servers must be a list of "HOST:PORT" strings; ignored']


def test_the_shipped_config_names_no_servers() -> None:
    etc = Path(__file__).resolve().parents[3] / "etc" / "harpd.toml"
    where, problems = route.choose({"HARP_CONFIG": str(etc)})
    assert problems == [] and where.servers == () and where.harpd_uids == (0,)


@pytest.mark.parametrize(
    "text",
    [
        '[client]\nservers = ["a:1", "b:2"]\n',
        "[client]\nservers = ['a:1','b:2'] # two\n",
        '[client]\nservers = []\n',
        '[client]\nservers = ["a:1",]\n',
        '[client]\nservers = [\n  "a:1",\n]\n',  # multi-line: left to tomllib
        '[client]\nservers = ["a\\\\:1"]\n',  # escapes: left to tomllib
        '[client.extra]\nx = 1\n[client]\nservers = ["a:1"]\n',
        '[client]\nharpd_uid = 990\n',
        '[client]\nharpd_uid = 0990\n',  # not TOML: both refuse
    ],
)
def test_the_fast_reader_agrees_with_tomllib_on_the_client_keys(text: str) -> None:
    import tomllib

    from harp_submit import config_file

    keys = [("client", "servers"), ("client", "harpd_uid")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        with pytest.raises(ValueError):
            config_file.values(text, keys)
        return
    expected = {(t, k): data[t][k] for t, k in keys if k in data.get(t, {})}
    fast = config_file.simple_values(text, keys)
    assert fast is config_file.UNSURE or fast == expected
    assert config_file.values(text, keys) == expected


def test_harp_cli_with_config_reaches_harpd_as_the_file_says(tmp_path: Path) -> None:
    import argparse

    from harpd.cli.ask import route_of

    cfg = _config(
        tmp_path,
        '[server]\nsocket = "/x/h.sock"\n[client]\nservers = ["harp1:6820"]\nharpd_uid = 7\n'
        '[munge]\nsocket = "/m.sock"\n',
    )
    where = route_of(argparse.Namespace(config=cfg))
    assert (where.socket, where.servers, where.munge_socket, where.harpd_uids) == (
        "/x/h.sock",
        (("harp1", 6820),),
        "/m.sock",
        (7,),
    )
