"""Stored records another harp version wrote: read as stored, never lost (``records.kept_as_stored``)."""

from __future__ import annotations

from harpd.protocol import Decision
from harpd.records import Change, Resources, kept_as_stored


def test_a_valid_stored_object_is_validated_as_the_socket_validates_it():
    c = Change.from_json({"option": "time", "value": "00:10:00", "old": "01:00:00", "reason": "bound"})
    assert (c.option, c.value, c.old) == ("time", "00:10:00", "01:00:00")
    assert Resources.from_json({"time_s": 600}).time_s == 600


def test_one_this_harpd_would_refuse_is_kept_with_its_known_fields():
    # an option a later harp changes, with a key this one does not know
    c = Change.from_json({"option": "gpus-per-task", "value": "2", "reason": "later", "note": "extra"})
    assert (c.option, c.value, c.old, c.reason) == ("gpus-per-task", "2", None, "later")
    assert not hasattr(c, "note")
    r = Resources.from_json({"time_s": -5, "mem_mb": 100})  # out of range for this version: kept as written
    assert (r.time_s, r.mem_mb) == (-5, 100)
    assert Resources.from_json(None) == Resources() and Resources.from_json([1, 2]) == Resources()
    d = kept_as_stored(Decision, {"changes": "not a list", "model": "m"})
    assert (d.changes, d.model) == ("not a list", "m")
