"""``harp dnn``: the DNN memory model and GPU choice, by hand.

``harp dnn estimate KEY=VALUE ...`` takes the keys of a ``#HARP dnn`` line (plus
``gpus=N``) and prints the per-GPU breakdown, one column per ZeRO stage when
``zero=auto``: the same numbers harpd uses, so a user can see why a job got the
GPUs it got.  ``harp dnn choose KEY=VALUE ...`` runs the planner against the
configured GPU types and prints the sbatch changes it would make.
``harp dnn check`` compares ``[dnn] gpu_types`` with what Slurm reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harpd.cli.main import CliError, settings_of

NAME = "dnn"
HELP = "DNN training jobs: per-GPU memory estimate (ZeRO) and GPU configuration choice"

_ROWS = (
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("gathered_layer", "gathered layer (ZeRO-3)"),
    ("activations", "activations"),
    ("activations_per_layer", "  per layer"),
    ("activations_output_layer", "  output layer + loss"),
    ("activations_recompute_working", "  recomputed layer"),
    ("cuda_context", "CUDA context"),
    ("distributed", "distributed buffers"),
    ("total", "total"),
    ("need_with_margin", "need (with margin)"),
    ("host_per_node", "host memory per node"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dnn_command", metavar="ACTION")
    keys_help = "KEY=VALUE as on a #HARP dnn line, e.g. params=7e9 layers=32 hidden=4096 heads=32 " \
                "seq_len=4096 micro_batch=4 zero=2 gpus=8 (harp dnn estimate keys lists them)"
    est = sub.add_parser("estimate", help="per-GPU memory breakdown for gpus=N (default 1)",
                         description="Per-GPU memory of a training setup: model states by ZeRO stage, "
                                     "activations, CUDA context, distributed buffers, margin.")
    est.add_argument("keys", nargs="*", metavar="KEY=VALUE", help=keys_help)
    est.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                     help="GPUs on each node, for host memory under offload (default: all on one node)")
    est.add_argument("--format", choices=("table", "json"), default="table")
    est.add_argument("--cwd", default=None, help="directory config= paths are relative to (default: here)")
    cho = sub.add_parser("choose", help="the GPU configuration harp would request, from [dnn] gpu_types",
                         description="Run the planner on a description and print the sbatch changes.")
    cho.add_argument("keys", nargs="*", metavar="KEY=VALUE", help=keys_help)
    cho.add_argument("--format", choices=("table", "json"), default="table")
    cho.add_argument("--cwd", default=None, help="directory config= paths are relative to (default: here)")
    sub.add_parser("check", help="compare [dnn] gpu_types with Slurm's partitions and GRES",
                   description="Check each configured GPU type against scontrol show partition/node; "
                               "exit 1 when something disagrees.")


def _cwd(args: argparse.Namespace) -> str:
    import os

    return args.cwd or os.getcwd()


def _gib(b: float) -> str:
    return f"{b / (1 << 30):9.2f}"


def _describe(spec: Any) -> str:
    src = f"config {spec.config_path} ({spec.model})" if spec.config_path else "given"
    opt = spec.optimizer + ("" if spec.optimizer != "sgd" else (" +momentum" if spec.momentum else " no momentum"))
    off = [n for n, on in (("optimizer", spec.offload_optimizer), ("param", spec.offload_param)) if on]
    return (f"{spec.params / 1e9:.3g}B parameters ({src}), {opt} {spec.precision}, "
            f"micro_batch={spec.micro_batch} seq_len={spec.seq_len}, layers={spec.layers} hidden={spec.hidden} "
            f"heads={spec.heads} vocab={spec.vocab}, recompute={spec.recompute} attention={spec.attention}"
            + (f", offload={','.join(off)}" if off else "") + f", accounting={spec.accounting}")


def _estimate(args: argparse.Namespace) -> int:
    from harpd.dnn.errors import DnnError
    from harpd.dnn.gpu_choice import stages_for
    from harpd.dnn.spec import build_spec, tokens_from_args
    from harpd.dnn.zero import estimate

    if not args.keys:
        raise CliError("harp dnn estimate needs KEY=VALUE words, e.g. params=7e9 layers=32 hidden=4096 "
                       "heads=32 seq_len=4096 gpus=8 zero=auto")
    dnn = settings_of(args).dnn
    try:
        spec = build_spec(tokens_from_args(args.keys), _cwd(args))
        n = spec.gpus or 1
        gpn = args.gpus_per_node
        if gpn is not None and gpn < 1:
            raise CliError("--gpus-per-node must be at least 1")
        results = {stage: estimate(spec, n, stage, cuda_context_gb=dnn.cuda_context_gb,
                                   distributed_overhead_gb=dnn.distributed_overhead_gb,
                                   margin=dnn.safety_margin, gpus_per_node=gpn)
                   for stage in stages_for(spec)}
    except DnnError as exc:
        raise CliError(str(exc)) from None
    if args.format == "json":
        out = {
            "spec": spec.to_dict(), "gpus": n, "margin": dnn.safety_margin,
            "stages": {str(s): {k: round(v) for k, v in e.breakdown().items()} for s, e in results.items()},
            "unit": "bytes per GPU (host_per_node: bytes per node)",
        }
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"harp dnn estimate: {_describe(spec)}")
    print(f"{n} GPU(s), data parallel; GiB per GPU, margin {dnn.safety_margin:.0%}")
    header = f"{'':26}" + "".join(f"{'zero=' + str(s):>10}" for s in results)
    print(header)
    for key, label in _ROWS:
        if key == "host_per_node" and not any(e.host_per_node for e in results.values()):
            continue
        if key == "activations_recompute_working" and spec.recompute != "full":
            continue
        lbl = label + (f" (x{spec.layers})" if key == "activations_per_layer" else "")
        print(f"{lbl:26}" + "".join(f" {_gib(e.breakdown()[key])}" for e in results.values()))
    for note in spec.notes:
        print(f"note: {note}")
    return 0


def _choose(args: argparse.Namespace) -> int:
    import shlex

    from harpd.dnn.plan import plan_dnn_job

    if not args.keys:
        raise CliError("harp dnn choose needs KEY=VALUE words, e.g. config=config.json seq_len=2048 zero=auto")
    settings = settings_of(args)
    line = "#HARP dnn " + " ".join(shlex.quote(k) for k in args.keys)
    plan = plan_dnn_job([line], {}, _cwd(args), settings)
    if args.format == "json":
        json.dump({"changes": plan.changes, "explain": plan.explain, "error": plan.error}, sys.stdout, indent=2)
        print()
        return 1 if plan.error else 0
    if plan.error:
        raise CliError(plan.error)
    chosen = plan.explain["dnn"]["chosen"]
    print(f"harp dnn choose: {chosen['n_gpus']} x {chosen['gpu_type']} ({chosen['nodes']} node(s) x "
          f"{chosen['gpus_per_node']}) in partition {chosen['partition']}, ZeRO stage {chosen['zero']}, "
          f"{chosen['need_gib']} of {chosen['capacity_gib']} GiB per GPU")
    opts = [f"--{ch['option']}={ch['value']}" for ch in plan.changes]
    width = max((len(o) for o in opts), default=0)
    for opt, ch in zip(opts, plan.changes):
        print(f"  {opt:<{width}}  {ch['reason']}")
    for note in plan.explain["dnn"].get("notes", []):
        print(f"note: {note}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from harpd.dnn.site_check import check_gpu_types
    from harpd.slurm import SlurmError, get_backend

    settings = settings_of(args)
    types = settings.dnn.gpu_types
    if not types:
        raise CliError("no GPU types are configured ([dnn] gpu_types in harpd.toml): nothing to check")
    try:
        partitions = get_backend(settings).partitions()
    except SlurmError as exc:
        raise CliError(f"cannot read Slurm's partitions: {exc}") from None
    check = check_gpu_types(types, partitions)
    for gt in types:
        nodes = check.max_nodes.get(gt.name, 0)
        if nodes:
            gpn = check.gpus_per_node.get(gt.name, gt.gpus_per_node)
            print(f"{gt.name}: partition {gt.partition}, up to {nodes} node(s) x {gpn} GPUs, "
                  f"{gt.memory_gb:g} GiB each (from the config), billing weight {gt.billing_weight:g}")
    for problem in check.problems:
        print(f"problem: {problem}")
    return 0 if check.ok else 1


def run(args: argparse.Namespace) -> int:
    if args.dnn_command == "check":
        return _check(args)
    if args.dnn_command == "estimate":
        return _estimate(args)
    if args.dnn_command == "choose":
        return _choose(args)
    raise CliError("harp dnn needs an action: estimate, choose or check (harp dnn --help)")
