"""What a submission's resource options amount to, read once for every consumer.

The live predictor (a feature of the job) and the report (memory of a
``--mem-per-gpu`` job) both need the GPU count behind ``--gpus``/``--gres``;
reading it in one place keeps a report's figures and the model's inputs in
agreement.
"""

from __future__ import annotations

__all__ = ["gpu_count"]


def gpu_count(gpus: str | None, gres: str | None) -> float | None:
    """GPUs asked for in ``--gpus`` (``2``, ``a100:2``) or ``--gres gpu[:type]:N``.

    ``--gpus`` wins when given; the first GPU entry counts.  An entry without
    a count (``--gres=gpu``, ``--gres=gpu:a100``) is one GPU, as Slurm reads
    it.  None when neither option asks for GPUs (``--gres=shard:3``).
    """
    for is_gres, spec in ((False, gpus), (True, gres)):
        if not spec:
            continue
        for part in str(spec).split(","):
            bits = part.split(":")
            if is_gres and bits[0] != "gpu":
                continue
            try:
                return float(bits[-1])
            except ValueError:
                return 1.0
    return None
