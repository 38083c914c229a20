"""A deliberately naive EASY scheduler, the oracle for ``harpd.simulate.easy``.

It recomputes everything at every instant (no event heap, no cached
reservation, no vectorised scan, a plain list for the queue), so it is slow
and obviously right; the fast engine must produce the very same schedule.
Same conventions: run events by job index, then resubmissions, then
arrivals, then one pass.
"""

from __future__ import annotations

from collections import deque


def shadow_time(running, lim, width, free, need):
    """(when the queue's head can start as the running jobs end at their limits, the processors then spare)."""
    ends: dict[float, int] = {}
    for j, s in running.items():
        ends[s + lim[j]] = ends.get(s + lim[j], 0) + width[j]
    avail = free
    for shadow in sorted(ends):
        avail += ends[shadow]
        if avail >= need:
            break
    return shadow, avail - need


def reference_easy(submit, width, runtime, limit, procs, mode="hard", hook=None):
    n = len(submit)
    lim = [float(x) for x in limit]
    arrivals = deque(sorted((i for i in range(n) if width[i] <= procs), key=lambda i: (submit[i], i)))
    queue: list[int] = []
    running: dict[int, float] = {}  # job -> start of its current run
    out = {
        "start": [None] * n,
        "first_start": [None] * n,
        "end": [None] * n,
        "kills": [0] * n,
        "exts": [0] * n,
        "promised": [None] * n,
    }
    free = procs

    def begin(j, now):
        nonlocal free
        running[j] = now
        free -= width[j]
        out["start"][j] = now
        if out["first_start"][j] is None:
            out["first_start"][j] = now

    while arrivals or queue or running:
        times = [running[j] + min(runtime[j], lim[j]) for j in running]
        if arrivals:
            times.append(submit[arrivals[0]])
        now = min(times)
        for j in sorted(j for j in running if running[j] + min(runtime[j], lim[j]) == now):
            if runtime[j] <= lim[j]:
                del running[j]
                free += width[j]
                out["end"][j] = now
                continue
            new = hook(j, lim[j], out["kills"][j] + out["exts"][j]) if hook else None
            if mode == "soft" and new is not None:
                lim[j] = new
                out["exts"][j] += 1
                continue
            del running[j]
            free += width[j]
            out["kills"][j] += 1
            if new is None:
                out["end"][j] = now
            else:
                lim[j] = new
                out["promised"][j] = None
                queue.append(j)
        while arrivals and submit[arrivals[0]] == now:
            queue.append(arrivals.popleft())
        while queue and width[queue[0]] <= free:
            begin(queue.pop(0), now)
        if not queue:
            continue
        head = queue[0]
        shadow, extra = shadow_time(running, lim, width, free, width[head])
        if out["promised"][head] is None:
            out["promised"][head] = shadow
        for j in list(queue[1:]):
            if width[j] > free:
                continue
            if now + lim[j] <= shadow:
                queue.remove(j)
                begin(j, now)
            elif width[j] <= extra:
                extra -= width[j]
                queue.remove(j)
                begin(j, now)
    return out
