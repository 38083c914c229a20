"""``harp replay``: a trace walked job by job with harpd's decisions, and what they would have cost.

Outside ``harpd.predict`` so that the live path never carries the replay
(the ``replay-apart`` contract): harpd imports it only to score champions.
"""
