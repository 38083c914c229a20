"""harp's per-GPU training memory against peaks measured on a real GPU (an NVIDIA H200).

For each measured case (``tests/fixtures/gpu_memory/``: 11 under bf16 autocast
over fp32 weights, 8 with bf16 weights and an fp32 master copy; see the README
there) the script builds the ``#HARP dnn`` description ``compare.py`` passes to
``harp dnn estimate`` (config, seq_len, micro_batch, attention, recompute,
zero=0, gpus=1, mixed=autocast|weights), computes harp's total and need (total
x (1 + ``dnn.safety_margin``), the default settings) and prints them beside the
measured peak (``max_memory_reserved`` + CUDA context).

Figures, over all cases: the largest measured peak / harp's need (target <= 1:
a job harp sized would not run out of memory) and the largest need / measured
peak (target <= 1.35: GPUs not reserved for nothing).

    python bench/dnn_gpu_memory.py
"""
# bench: timeout=120

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO / "tests" / "fixtures" / "gpu_memory"
LOOSE = 1.35
GIB = float(1 << 30)


def main() -> int:
    from harpd.config import DnnSettings
    from harpd.dnn.spec import build_spec
    from harpd.dnn.zero import estimate

    dnn = DnnSettings()
    over: list[float] = []
    loose: list[float] = []
    print(f"{'case':52s} {'total':>7s} {'need':>7s} {'peak':>7s} {'need/peak':>9s}")
    for path in sorted((DATA / "measured").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            mixed = "weights" if r.get("mode") == "bf16w" else "autocast"
            tokens = {
                "config": str(DATA / "configs" / f"{r['model']}.json"),
                "seq_len": str(r["seq_len"]),
                "micro_batch": str(r["micro_batch"]),
                "attention": "flash" if r["attention"] == "sdpa" else "eager",
                "recompute": r["recompute"],
                "zero": "0",
                "gpus": "1",
                "mixed": mixed,
            }
            est = estimate(
                build_spec(tokens),
                1,
                0,
                cuda_context_gb=dnn.cuda_context_gb,
                distributed_overhead_gb=dnn.distributed_overhead_gb,
                margin=dnn.safety_margin,
            )
            peak = r["peak_reserved_gib"] + r["context_gib"]
            need = est.need / GIB
            over.append(peak / need)
            loose.append(need / peak)
            name = f"{r['model']} s{r['seq_len']} b{r['micro_batch']} {r['attention']} {r['recompute']} {mixed}"
            print(f"{name:52s} {est.total / GIB:7.2f} {need:7.2f} {peak:7.2f} {need / peak:9.2f}")
    worst_over, worst_loose = max(over), max(loose)
    print(f"cases {len(over)}, margin {dnn.safety_margin:.0%}")
    print(
        f"FIGURE dnn_gpu_memory_peak_over_need_max: {worst_over:.3f} x (target <= 1.0) "
        f"{'PASS' if worst_over <= 1.0 else 'FAIL'}"
    )
    print(
        f"FIGURE dnn_gpu_memory_need_over_peak_max: {worst_loose:.3f} x (target <= {LOOSE}) "
        f"{'PASS' if worst_loose <= LOOSE else 'FAIL'}"
    )
    return 0 if worst_over <= 1.0 and worst_loose <= LOOSE else 1


if __name__ == "__main__":
    sys.exit(main())
