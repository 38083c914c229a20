"""A first allocation for a workflow task type with no finished run: the share of its request earlier types needed.

A workflow submits all samples of a process at once (nf-core: every sample
of ``STAR_ALIGN`` in the same second), so a process's first tasks have no
run of their own to learn from and would all run at the user's request.
Memory does not carry from one tool to another, but how much of its request
a process needs does, within one site's pipelines: requests come from a
few labels (``process_low``/``medium``/``high``) that over-ask by similar
margins.  A type's *share* is the most any of its finished runs used over
what it asked.  Treating task types as exchangeable, the share that covers a
new type with probability at least 1 − α is the ⌈(k+1)(1−α)⌉-th smallest of
the k shares seen (split conformal over types); with fewer than
(1−α)/α types there is none and the request stands.

The type, not the task, is the unit: all siblings of a type start from the
same allocation, so a share too low fails them together.  Pricing shares by
their cost over tasks (harp's rule for a type's own runs) was tried here and
failed whole types (chronological nf-core replays: 1,799 and 1,870 failures
against 222 and 30); a coverage bound over types does not.
Units: a share is a ratio, allocations are bytes.
"""

from __future__ import annotations

import bisect
import math

ALPHA = 0.1  # at most this share of new types needs more than the prior gives (9 types seen before it acts)


class TypePrior:
    """The shares of the task types seen so far; ``first(request)`` is a new type's allocation, or None."""

    def __init__(self, alpha: float = ALPHA) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), not {alpha!r}")
        self.alpha = alpha
        self.shares: dict[str, float] = {}
        self._share: float | None = None
        # (when, share from then on), for runs learnt with a time, in the order learnt
        self._times: list[float] = []
        self._past: list[float | None] = []

    def learn(self, kind: str, usage: float, request: float, at: float | None = None) -> None:
        """One finished run of type ``kind``, ended ``at`` (a run without a request says nothing about shares)."""
        if not (request > 0) or not (usage >= 0):
            return
        share = usage / request
        if share > self.shares.get(kind, -math.inf):
            self.shares[kind] = share
            self._refit()
            if at is not None and not math.isnan(at):
                self._times.append(float(at))
                self._past.append(self._share)

    def _refit(self) -> None:
        k = len(self.shares)
        rank = math.ceil((k + 1) * (1.0 - self.alpha))
        self._share = None if rank > k else sorted(self.shares.values())[rank - 1]

    @property
    def share(self) -> float | None:
        """The share a new type gets (None: too few types yet)."""
        return self._share

    def share_as_of(self, when: float) -> float | None:
        """The share as it stood at ``when``, from the runs learnt with their end time (in time order)."""
        i = bisect.bisect_right(self._times, when)
        return self._past[i - 1] if i else None

    def first(self, request: float, as_of: float | None = None) -> float | None:
        """A new type's first allocation: the share of ``request``; None (the request stands) when no less.

        ``as_of``: the share as it stood then (a task sized at its submission
        and not re-decided since: harpd re-decides a pending task only when a
        task of its own type finishes).
        """
        share = self._share if as_of is None else self.share_as_of(as_of)
        if share is None or not (request > 0) or share >= 1.0:
            return None
        return share * request
