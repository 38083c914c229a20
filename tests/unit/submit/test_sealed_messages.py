"""The TCP envelope: a request's credential vouches for its body; an answer's for harpd and the request."""

from __future__ import annotations

import pytest

from harp_submit import sealed
from tests.helpers.fake_munge import DeadMunge, FakeMunge

BODY = b'{"v":1,"op":"health"}'


def _split(data: bytes) -> tuple[bytes, bytes]:
    cred, body, rest = data.split(b"\n")
    assert rest == b""
    return cred, body


def test_a_request_carries_its_maker_and_a_fresh_nonce() -> None:
    munged = FakeMunge()
    data, nonce = sealed.seal_request(munged.as_user(1001, 1002), BODY)
    again, nonce2 = sealed.seal_request(munged.as_user(1001, 1002), BODY)
    assert nonce != nonce2 and len(nonce) == 32
    cred, body = _split(data)
    assert body == BODY and sealed.open_request(munged, cred, body) == (1001, 1002, nonce)


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda cred, body: (cred, body.replace(b"health", b"retrain")), "changed after the credential was made"),
        (lambda cred, body: (b"nonsense", body), "no MUNGE credential"),
        (lambda cred, body: (b"MUNGE:forged:", body), "malformed credential"),
    ],
)
def test_a_tampered_or_forged_request_is_refused(change, needle: str) -> None:
    munged = FakeMunge()
    data, _ = sealed.seal_request(munged, BODY)
    cred, body = change(*_split(data))
    with pytest.raises(sealed.Refused, match=needle):
        sealed.open_request(munged, cred, body)


def test_a_replayed_or_foreign_credential_is_refused() -> None:
    munged = FakeMunge()
    data, _ = sealed.seal_request(munged, BODY)
    cred, body = _split(data)
    sealed.open_request(munged, cred, body)
    with pytest.raises(sealed.Refused, match="replayed"):
        sealed.open_request(munged, cred, body)
    data, _ = sealed.seal_request(munged.with_key("another cluster"), BODY)
    with pytest.raises(sealed.Refused, match="this cluster's MUNGE key") as err:
        sealed.open_request(munged, *_split(data))
    assert not err.value.munged


def test_munged_down_is_told_apart_from_a_bad_credential() -> None:
    with pytest.raises(sealed.Refused) as err:
        sealed.open_request(DeadMunge(), b"MUNGE:1:", BODY)
    assert err.value.munged


def test_an_answer_is_believed_only_from_harpd_and_for_this_request() -> None:
    munged = FakeMunge()
    _, nonce = sealed.seal_request(munged, BODY)
    answer = b'{"ok":true}'
    cred, body = _split(sealed.seal_answer(munged, nonce, answer))
    sealed.open_answer(munged, nonce, cred, body, (0,))  # harpd as root: believed
    cred, body = _split(sealed.seal_answer(munged.as_user(1001), nonce, answer))
    with pytest.raises(sealed.Refused, match="uid 1001, not by harpd"):
        sealed.open_answer(munged, nonce, cred, body, (0,))
    cred, body = _split(sealed.seal_answer(munged, b"0" * 32, answer))
    with pytest.raises(sealed.Refused, match="another request"):
        sealed.open_answer(munged, nonce, cred, body, (0,))
    cred, body = _split(sealed.seal_answer(munged, nonce, answer))
    with pytest.raises(sealed.Refused, match="changed after"):
        sealed.open_answer(munged, nonce, cred, b'{"ok":true,"changes":[]}', (0,))
    # a request's credential passed off as an answer's
    req, _ = sealed.seal_request(munged, answer)
    with pytest.raises(sealed.Refused, match="not for a harp answer"):
        sealed.open_answer(munged, nonce, req.split(b"\n")[0], answer, (0,))
