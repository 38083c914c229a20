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
    ("weight_copies_16bit", "16-bit weight copies"),
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
    keys_help = (
        "KEY=VALUE as on a #HARP dnn line, e.g. params=7e9 layers=32 hidden=4096 heads=32 "
        "seq_len=4096 micro_batch=4 zero=2 gpus=8 (harp dnn estimate keys lists them)"
    )
    est = sub.add_parser(
        "estimate",
        usage="harp dnn estimate [options] KEY=VALUE ...",
        help="per-GPU memory breakdown for gpus=N (default 1)",
        description="Per-GPU memory of a training setup: model states by ZeRO stage, "
        "activations, CUDA context, distributed buffers, margin. With params= "
        "alone: the model states only.",
    )
    _add_keys_and_options(est, "estimate", keys_help, argparse.REMAINDER)
    cho = sub.add_parser(
        "choose",
        usage="harp dnn choose [options] KEY=VALUE ...",
        help="the GPU configuration harp would request, from [dnn] gpu_types",
        description="Run the planner on a description and print the sbatch changes.",
    )
    _add_keys_and_options(cho, "choose", keys_help, argparse.REMAINDER)
    from harpd.cli import dnn_plan

    pla = sub.add_parser(
        "plan",
        usage="harp dnn plan [options] KEY=VALUE ...",
        help="deadline, search (per stage) and batch plan: time and billed GPU-hours",
        description="The cheapest configuration meeting deadline=, a plan per successive-"
        "halving stage (trials= eta=), or the GPU count and micro-batch of most "
        "throughput per billed GPU-hour for batch=LO..HI; see docs/dnn.md.",
    )
    dnn_plan.add_arguments(pla, keys_help + " tokens=20e9 deadline=8h", argparse.REMAINDER)
    from harpd.cli import dnn_checkpoint

    ckp = sub.add_parser(
        "checkpoint",
        usage="harp dnn checkpoint [options] KEY=VALUE ...",
        help="checkpoint schedule: denser early (COCI) from cost, interruption rate, convergence",
        description="Checkpoint times for a resumable job from its checkpoint cost, the site's "
        "interruption hazard (or rate=) and a power-law convergence profile, with the "
        "even Young/Daly interval beside them; see docs/dnn.md.",
    )
    dnn_checkpoint.add_arguments(ckp, argparse.REMAINDER)
    sub.add_parser(
        "check",
        help="compare [dnn] gpu_types with Slurm's partitions and GRES",
        description="Check each configured GPU type against scontrol show partition/node; "
        "exit 1 when something disagrees.",
    )


def _add_keys_and_options(p: argparse.ArgumentParser, action: str, keys_help: str, nargs: str) -> None:
    """KEY=VALUE words and the options of ``estimate``/``choose``, in one place.

    The words are taken with ``nargs=REMAINDER`` by the main parser, so options
    may come before, between or after them (``params=7e9 --format json gpus=8``);
    ``_options_among_keys`` then parses the words again with ``nargs="*"``.
    """
    p.add_argument("keys", nargs=nargs, metavar="KEY=VALUE", help=keys_help)
    if action == "estimate":
        p.add_argument(
            "--gpus-per-node",
            type=int,
            default=None,
            metavar="N",
            help="GPUs on each node, for host memory under offload (default: all on one node)",
        )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--cwd", default=None, help="directory config= paths are relative to (default: here)")


def _options_among_keys(args: argparse.Namespace) -> None:
    """Options written among or after the KEY=VALUE words, parsed into ``args``."""
    if not any(w.startswith("-") for w in args.keys):
        return
    action = args.dnn_command
    p = argparse.ArgumentParser(prog=f"harp dnn {action}", add_help=False)
    if action == "plan":
        from harpd.cli import dnn_plan

        dnn_plan.add_arguments(p, "", "*")
    elif action == "checkpoint":
        from harpd.cli import dnn_checkpoint

        dnn_checkpoint.add_arguments(p, "*")
    else:
        _add_keys_and_options(p, action, "", "*")
    p.set_defaults(**{k: v for k, v in vars(args).items() if k != "keys"})
    args.__dict__.update(vars(p.parse_intermixed_args(args.keys)))


def _cwd(args: argparse.Namespace) -> str:
    import os

    return args.cwd or os.getcwd()


def _gib(b: float) -> str:
    return f"{b / (1 << 30):9.2f}"


def _mixed_words(spec: Any) -> str:
    """The precision layout as the description prints it: none in fp32 or the paper's arithmetic."""
    from harpd.dnn.gpu_choice import stages_for
    from harpd.dnn.zero import mixed_layout

    if spec.precision == "fp32" or spec.accounting == "paper":
        return ""
    layouts = {mixed_layout(spec, stage) for stage in stages_for(spec)}
    return f" mixed={layouts.pop()}" if len(layouts) == 1 else " mixed=autocast at zero=0, weights at 1-3"


def _describe(spec: Any) -> str:
    src = f"config {spec.config_path} ({spec.model})" if spec.config_path else "given"
    opt = spec.optimizer + ("" if spec.optimizer != "sgd" else (" +momentum" if spec.momentum else " no momentum"))
    off = [n for n, on in (("optimizer", spec.offload_optimizer), ("param", spec.offload_param)) if on]
    return (
        f"{spec.params / 1e9:.3g}B parameters ({src}), {opt} {spec.precision}" + _mixed_words(spec) + ", "
        f"micro_batch={spec.micro_batch} seq_len={spec.seq_len}, layers={spec.layers} hidden={spec.hidden} "
        f"heads={spec.heads} vocab={spec.vocab}, recompute={spec.recompute} attention={spec.attention}"
        + (f", offload={','.join(off)}" if off else "")
        + f", accounting={spec.accounting}"
    )


def _estimate(args: argparse.Namespace) -> int:
    from harpd.dnn.errors import DnnError
    from harpd.dnn.gpu_choice import stages_for
    from harpd.dnn.spec import build_spec, tokens_from_args
    from harpd.dnn.zero import estimate

    if not args.keys:
        raise CliError(
            "harp dnn estimate needs KEY=VALUE words, e.g. params=7e9 layers=32 hidden=4096 "
            "heads=32 seq_len=4096 gpus=8 zero=auto"
        )
    dnn = settings_of(args).dnn
    try:
        spec = build_spec(tokens_from_args(args.keys), _cwd(args), shape_required=False)
        n = spec.gpus or 1
        gpn = args.gpus_per_node
        if gpn is not None and gpn < 1:
            raise CliError("--gpus-per-node must be at least 1")
        if not spec.shape_known:
            return _states_only(args, spec, n)
        results = {
            stage: estimate(
                spec,
                n,
                stage,
                cuda_context_gb=dnn.cuda_context_gb,
                distributed_overhead_gb=dnn.distributed_overhead_gb,
                margin=dnn.safety_margin,
                gpus_per_node=gpn,
            )
            for stage in stages_for(spec)
        }
    except DnnError as exc:
        raise CliError(str(exc)) from None
    if args.format == "json":
        out = {
            "spec": spec.to_dict(),
            "gpus": n,
            "margin": dnn.safety_margin,
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
        if key == "weight_copies_16bit" and not any(e.states.cast_copies for e in results.values()):
            continue
        lbl = label + (f" (x{spec.layers})" if key == "activations_per_layer" else "")
        print(f"{lbl:26}" + "".join(f" {_gib(e.breakdown()[key])}" for e in results.values()))
    for note in spec.notes:
        print(f"note: {note}")
    return 0


_STATE_ROWS = (
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("gathered_layer", "gathered layer (ZeRO-3)"),
    ("weight_copies_16bit", "16-bit weight copies"),
)
NEED_SHAPE = "activations need layers= hidden= heads= seq_len= (or config=path/to/config.json)"


def _states_only(args: argparse.Namespace, spec: Any, n: int) -> int:
    """params= without the model's shape: the model states per GPU, and what the rest needs.

    The ZeRO paper's own example (params=7.5e9 gpus=64, no shape) is asked this
    way; refusing it for want of layers= would hide the part that needs nothing else.
    """
    from harpd.dnn.gpu_choice import stages_for
    from harpd.dnn.zero import states_of

    rows: dict[int, dict[str, float]] = {}
    for stage in stages_for(spec):
        st = states_of(spec, n, stage)
        rows[stage] = {
            "parameters": st.params,
            "gradients": st.grads,
            "optimizer_states": st.optimizer,
            "gathered_layer": st.gathered,
            "weight_copies_16bit": st.cast_copies,
            "model_states": st.gpu,
            "host_per_rank": st.host_per_rank,
        }
    if args.format == "json":
        out = {
            "spec": spec.to_dict(),
            "gpus": n,
            "model_states_only": True,
            "missing": NEED_SHAPE,
            "stages": {str(s): {k: round(v) for k, v in r.items()} for s, r in rows.items()},
            "unit": "bytes per GPU (host_per_rank: bytes in host memory per rank)",
        }
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    opt = spec.optimizer + ("" if spec.optimizer != "sgd" else (" +momentum" if spec.momentum else " no momentum"))
    print(
        f"harp dnn estimate: {spec.params / 1e9:.3g}B parameters, {opt} {spec.precision}" + _mixed_words(spec) + ", "
        f"accounting={spec.accounting}: model states only"
    )
    print(f"{n} GPU(s), data parallel; GiB per GPU")
    print(f"{'':26}" + "".join(f"{'zero=' + str(s):>10}" for s in rows))
    for key, label in _STATE_ROWS:
        if key in ("gathered_layer", "weight_copies_16bit") and not any(r[key] for r in rows.values()):
            continue
        print(f"{label:26}" + "".join(f" {_gib(r[key])}" for r in rows.values()))
    print(f"{'model states (GiB)':26}" + "".join(f" {_gib(r['model_states'])}" for r in rows.values()))
    print(f"{'model states (GB)':26}" + "".join(f" {r['model_states'] / 1e9:9.2f}" for r in rows.values()))
    if any(r["host_per_rank"] for r in rows.values()):
        print(f"{'host memory per rank':26}" + "".join(f" {_gib(r['host_per_rank'])}" for r in rows.values()))
    print(f"not counted: activations, CUDA context, distributed buffers; {NEED_SHAPE} for the whole GPU")
    if spec.accounting == "harp":
        print(
            "note: accounting=harp counts what DeepSpeed allocates; accounting=paper gives the ZeRO paper's "
            "arithmetic (2+2+K bytes per parameter, K=12 for mixed-precision Adam)"
        )
    if 3 in rows and spec.accounting == "harp" and not spec.largest_layer:
        print("note: ZeRO-3 also gathers its largest layer whole: not counted without largest_layer= or hidden=")
    return 0


def _choose(args: argparse.Namespace) -> int:
    import shlex

    from harpd.dnn.plan import plan_dnn_job

    if not args.keys:
        raise CliError("harp dnn choose needs KEY=VALUE words, e.g. config=config.json seq_len=2048 zero=auto")
    settings = settings_of(args)
    line = "#HARP dnn " + " ".join(shlex.quote(k) for k in args.keys)
    plan = plan_dnn_job([line], {}, _cwd(args), settings)
    from harpd.cli.dnn_plan import json_or_error

    if (rc := json_or_error(plan, args.format)) is not None:
        return rc
    chosen = plan.explain["dnn"]["chosen"]
    print(
        f"harp dnn choose: {chosen['n_gpus']} x {chosen['gpu_type']} ({chosen['nodes']} node(s) x "
        f"{chosen['gpus_per_node']}) in partition {chosen['partition']}, ZeRO stage {chosen['zero']}, "
        f"{chosen['need_gib']} of {chosen['capacity_gib']} GiB per GPU"
    )
    opts = [f"--{ch.option}={ch.value}" for ch in plan.changes]
    width = max((len(o) for o in opts), default=0)
    for opt, ch in zip(opts, plan.changes):
        print(f"  {opt:<{width}}  {ch.reason}")
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
            print(
                f"{gt.name}: partition {gt.partition}, up to {nodes} node(s) x {gpn} GPUs, "
                f"{gt.memory_gb:g} GiB each (from the config), billing weight {gt.billing_weight:g}"
            )
    for problem in check.problems:
        print(f"problem: {problem}")
    return 0 if check.ok else 1


def run(args: argparse.Namespace) -> int:
    if args.dnn_command in ("estimate", "choose", "plan", "checkpoint"):
        _options_among_keys(args)
    if args.dnn_command == "checkpoint":
        from harpd.cli import dnn_checkpoint

        return dnn_checkpoint.run(args)
    if args.dnn_command == "plan":
        from harpd.cli import dnn_plan

        return dnn_plan.run(args)
    if args.dnn_command == "check":
        return _check(args)
    if args.dnn_command == "estimate":
        return _estimate(args)
    if args.dnn_command == "choose":
        return _choose(args)
    raise CliError("harp dnn needs an action: estimate, choose, plan, checkpoint or check (harp dnn --help)")
