"""harp-submit's typed view of the protocol names the same fields as harpd's models.

harp-submit cannot import harpd (standard library only), so it keeps its own
``TypedDict``s of the messages (``harp_submit.wire``); harpd's pydantic models
are the ones that validate.  A field added to one and not the other fails
here, not on a cluster where one side drops what the other sends.
"""

from __future__ import annotations

import pytest

from harp_submit import wire
from harpd import protocol, records

PAIRS = [
    (wire.ResourcesDict, records.Resources),
    (wire.JobRequestDict, protocol.JobRequest),
    (wire.ChangeDict, records.Change),
    (wire.LimitsDict, protocol.Limits),
    (wire.KeptDict, protocol.Kept),
    (wire.DecisionDict, protocol.Decision),
    (wire.PredictAnswerDict, protocol.PredictAnswer),
]


@pytest.mark.parametrize(("client", "server"), PAIRS, ids=[c.__name__ for c, _ in PAIRS])
def test_the_clients_fields_are_the_servers(client: type, server: type) -> None:
    assert list(client.__annotations__) == list(server.model_fields)  # type: ignore[attr-defined]


def test_the_register_message_holds_the_register_requests_fields() -> None:
    assert set(wire.RegisterMessage.__annotations__) == set(protocol.RegisterRequest.model_fields) - {"v"}


def test_the_protocol_and_the_store_share_one_resources_and_one_change() -> None:
    assert protocol.Resources is records.Resources and protocol.Change is records.Change
