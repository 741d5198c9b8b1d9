"""The ``byoc`` command line. Errors print one line and exit 2; a failed comparison exits 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import byoc
from byoc.batch import MAX_SAMPLE_MB, check_counts, check_outputs, sample_files
from byoc.config import Option, describe
from byoc.errors import ByocError, InputError, ModelError
from byoc.export import is_artifact
from byoc.graph import Graph, dtype_name
from byoc.inputs import made_at_random
from byoc.plan import FALLBACK
from byoc.plugins import registry
from byoc.progress import TerminalProgress

INPUT_HELP = "an input from a .npy file (repeat for each input); others are random"


def _inputs(pairs: Sequence[str] | None) -> dict[str, np.ndarray] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        # an input name may hold "=" too ("x=1" from an exporter): the split at which the
        # rest is a file
        splits = [(pair[:i], pair[i + 1 :]) for i, c in enumerate(pair) if c == "="]
        name, path = next(((n, p) for n, p in splits if n and os.path.isfile(p)), (name, path))
        if not sep or not name or not path:
            raise InputError(f"--input takes NAME=FILE.npy, got {pair!r}")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
            hint = (
                " (a file is data: byoc does not unpickle it); save strings as a unicode "
                "array: np.save(f, np.asarray(values, dtype=str))"
                if "Object arrays" in str(exc)
                else ""
            )
            raise InputError(f"cannot read input '{name}' from {path}: {exc}{hint}") from None
    return out


def cmd_backends(args: argparse.Namespace) -> int:
    reg = registry()
    rows: list[dict[str, Any]] = []
    for b in [reg.backends["onnxruntime"], *reg.claimable()]:
        reason = b.unavailable_reason
        ops: list[str] = []
        if b.name != "onnxruntime" and reason is None:
            ops = sorted(reg.supported_ops(b.name, _defaults(b)))
        rows.append(
            {
                "name": b.name,
                "distribution": b.distribution,
                "version": b.version,
                "available": reason is None,
                "reason": reason,
                "ops": ops,
                "patterns": []
                if reason
                else list(dict.fromkeys(p[0] for p in reg.pattern_table(b.name, _defaults(b))))
                if b.name != "onnxruntime"
                else [],
                "description": b.description,
                "reference": b.reference,
                "options": _options(b.options),
                "hooks": b.hooks,
            }
        )
    for broken in reg.broken:
        rows.append(
            {
                "name": broken.name,
                "distribution": broken.distribution,
                "version": broken.version,
                "available": False,
                "reason": broken.reason,
                "ops": [],
                "patterns": [],
                "description": "",
                "reference": False,
                "options": {},
                "hooks": [],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        state = "available" if r["available"] else f"UNAVAILABLE: {r['reason']}"
        if r["reference"]:
            state += " (reference: used only when `backends` names it)"
        origin = (
            f"onnxruntime {r['version']}, the fallback, from {r['distribution']}"
            if r["name"] == "onnxruntime"
            else f"{r['distribution']} {r['version']}"
        )
        print(f"{r['name']}  ({origin})  {state}")
        if r["description"]:
            print(f"    {r['description']}")
        if r["ops"]:
            print(f"    claims: {', '.join(r['ops'])}")
        if r["patterns"]:
            print(f"    patterns: {', '.join(r['patterns'])}")
    return 0


def _options(options: Mapping[str, Option]) -> dict[str, Any]:
    """A backend's own options for ``byoc backends --json``: type, default, help, allowed, and
    whether it is a setting of this machine (never in a ``.byoc`` file)."""
    return {
        key: {
            "type": getattr(o.type, "__name__", "list"),
            "default": o.default,
            "help": o.help,
            "allowed": describe(o.allowed) if o.allowed is not None else None,
            "local_only": o.local_only,
        }
        for key, o in options.items()
    }


def _defaults(b: Any) -> dict[str, Any]:
    return byoc.Config().backend_table(b.name, b.options)


def _config(args: argparse.Namespace) -> byoc.Config:
    """The command's config file, with ``--remeasure`` applied."""
    cfg = byoc.load_config(args.config)
    if getattr(args, "remeasure", False):
        cfg.compile["remeasure"] = True
    return cfg


def _placed_plan(args: argparse.Namespace) -> byoc.Plan:
    """The plan ``byoc compile`` would run: with measured placement (the default) that means
    compiling and measuring (cached after the first time); otherwise the static plan."""
    cfg = _config(args)
    if cfg.compile["placement"] != "measured":
        return byoc.partition(args.model, cfg)
    with _progress(args) as progress:
        plan = byoc.compile(args.model, cfg, progress=progress).plan
    if plan is None:  # compiler._whole_file
        raise ModelError(
            f"no plan to show: {args.model} is too large for byoc to partition (the warning "
            "above says why), and onnxruntime runs it whole"
        )
    return plan


def cmd_partition(args: argparse.Namespace) -> int:
    from byoc import render

    plan = _placed_plan(args)
    fmt = "json" if args.json else args.format
    if fmt == "json":
        text = json.dumps(plan.to_json(), indent=2)  # DESIGN.md's object: plans not in it
    elif fmt == "dot":
        text = render.to_dot(plan)
    elif fmt == "svg":
        text = render.to_svg(plan)
    else:
        text = plan.table(verbose=args.verbose) + _saved_plans_text(args)
    if args.output:
        Path(args.output).write_text(text + ("" if text.endswith("\n") else "\n"))
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from byoc.explain import explain_json, explain_node, explain_summary, explain_text

    if args.backend is not None and args.backend not in registry().backends:
        raise ByocError(
            f"--backend: no backend named '{args.backend}' is installed "
            f"(installed: {', '.join(registry().backends)})"
        )
    plan = _placed_plan(args)
    if args.json:
        print(json.dumps(explain_json(plan, args.backend), indent=2))
    elif args.node:
        print(explain_node(plan, args.node, args.backend))
    elif args.verbose:
        print(explain_summary(plan, args.backend) + "\n\n" + explain_text(plan, args.backend))
    else:
        print(explain_summary(plan, args.backend) + _saved_plans_text(args))
    return 0


def _saved_plans(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The input signatures ``byoc.InferenceSession`` saved plans for, for this model and
    config on this machine, newest first."""
    from byoc import session

    try:
        return session.saved_plans(args.model, byoc.load_config(args.config))
    except OSError:
        return []


def _saved_plans_text(args: argparse.Namespace, most: int = 8) -> str:
    saved = _saved_plans(args)
    if not saved:
        return ""
    shown = saved if args.verbose else saved[:most]
    lines = ["", f"byoc.InferenceSession's plans for this model and config ({len(saved)}):"]
    lines += [f"  {sig}: {how}" for sig, how in shown]
    if len(saved) > len(shown):
        lines.append(f"  ... and {len(saved) - len(shown)} more (-v lists them)")
    return "\n".join(lines)


def _progress(args: argparse.Namespace, label: str = "compiling") -> TerminalProgress:
    """A progress bar on stderr when it is a terminal, unless --quiet."""
    return TerminalProgress(sys.stderr, enabled=not args.quiet, label=label)


def cmd_compare(args: argparse.Namespace) -> int:
    with _progress(args) as progress:
        report = byoc.compare(args.model, _config(args), _inputs(args.input), progress=progress)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    if args.require_backend and not report.backends_ran():
        print("byoc: no backend ran (--require-backend)", file=sys.stderr)
        return 1
    return 0 if report.passed else 1


def cmd_run(args: argparse.Namespace) -> int:
    inputs = _inputs(args.input)
    if args.output and os.path.exists(args.output) and not os.path.isdir(args.output):
        raise InputError(f"-o/--output '{args.output}' is a file; give a directory for the .npy")
    cfg = _config(args)
    if is_artifact(args.model):  # a .byoc file (a zip), whatever its name
        compiled = byoc.load(args.model, config=cfg, trust_native=args.trust_native)
    else:
        with _progress(args) as progress:  # measured on the inputs given, if any
            compiled = byoc.compile(args.model, cfg, inputs=inputs, progress=progress)
    signature = Graph(compiled.plan.model) if compiled.plan is not None else compiled.inputs
    given = set(inputs or {})
    names = signature.inputs if isinstance(signature, Graph) else list(signature)
    missing = [n for n in names if n not in given and n not in cfg.compare["inputs"]]
    if given and missing:  # a forgotten input is a mistake in the command, not a wish
        raise InputError(
            f"--input gives {', '.join(sorted(given))} but not {', '.join(missing)}: give every "
            "input (--input NAME=FILE.npy, or the config's [compare] inputs), or none to run on "
            "random ones"
        )
    if missing and not args.quiet:
        print(
            f"byoc: random inputs for {', '.join(missing)} (seed {cfg.compare['seed']}); "
            "--input NAME=FILE.npy gives real ones",
            file=sys.stderr,
        )
    inputs = byoc.random_inputs(  # those not given
        signature,
        cfg.shapes,
        cfg.compare["seed"],
        cfg.compare["inputs"],
        compiled.input_ranges,
        given=inputs,
    )
    try:
        outputs = compiled.run(inputs)
    except (ByocError, RuntimeError) as exc:  # onnxruntime's own failures are RuntimeErrors
        advice = made_at_random(inputs, given, cfg.compare["inputs"])
        if not advice or isinstance(exc, InputError):
            raise
        raise ByocError(f"{exc}{advice}") from None
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    stems = _file_stems(list(outputs))
    for name, value in outputs.items():
        line = f"{name}: {_summary(value)}"
        if args.output:
            written = _save(Path(args.output) / stems[name], value)
            line += "" if written.stem == name else f" (saved as {written.name})"
        print(line)
    return 0


def _file_stems(names: list[str]) -> dict[str, str]:
    """Each output's file name without its extension: the name with characters other than
    letters, digits, '.', '_' and '-' as '_', numbered where two would meet (tf2onnx's 'y:0'
    and a 'y_0'; case aside, for file systems that ignore it). A name that is a file name
    already keeps it: 'y_0' is y_0.npy, and 'y:0' is y_0_2.npy, whatever their order."""
    bases = {n: "".join(c if c.isalnum() or c in "._-" else "_" for c in n) for n in names}
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names, key=lambda n: bases[n] != n):  # the unchanged first
        stem, k = bases[name], 1
        while stem.lower() in taken:
            k += 1
            stem = f"{bases[name]}_{k}"
        taken.add(stem.lower())
        stems[name] = stem
    return {n: stems[n] for n in names}


def _summary(value: Any) -> str:
    """A tensor's type, shape and range; a sequence's or a map's length and item types."""
    if isinstance(value, list | dict):
        items = value.values() if isinstance(value, dict) else value
        kinds = dict.fromkeys(_kind(v) for v in items)
        return f"{_kind(value)} of {len(value)} ({'; '.join(kinds) or 'empty'})"
    value = np.asarray(value)
    summary = _kind(value)
    if value.size and value.dtype.kind in "fiub":
        summary += f" min {value.min():.6g} max {value.max():.6g} mean {value.mean():.6g}"
    return summary


def _kind(value: Any) -> str:
    if isinstance(value, list | dict):
        return "map" if isinstance(value, dict) else "sequence"
    value = np.asarray(value)
    return f"{dtype_name(value.dtype)}{list(value.shape)}"


def _save(stem: Path, value: Any) -> Path:
    """A tensor as STEM.npy (strings as numpy text), a sequence of tensors as STEM.npz (arr_0,
    arr_1, ...), a map or a sequence of maps (ZipMap's) as STEM.json; the file written."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:  # ONNX strings: as text, which loads without pickle
            value = value.astype(str)
        path = stem.with_name(f"{stem.name}.npy")
        np.save(path, value)
    elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
        path = stem.with_name(f"{stem.name}.npz")
        np.savez(path, *value)
    else:
        path = stem.with_name(f"{stem.name}.json")
        path.write_text(json.dumps(_plain(value)))
    return path


def _plain(value: Any) -> Any:
    """``value`` in JSON's types: map keys as text, numbers and arrays as numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return np.asarray(value).tolist()


def cmd_inspect(args: argparse.Namespace) -> int:
    from byoc.reader import inspect

    info = inspect(args.file)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if info["runs_here"] else 1
    print(f"{info['file']}: .byoc format {info['format_version']}, written by byoc "
          f"{info['byoc_version']}, {info['bytes'] / 1024:.1f} KiB")  # fmt: skip
    for b in info["backends"]:
        here = b["installed"] or "not installed"
        # the fallback is byoc's own, its version onnxruntime's
        made = "onnxruntime" if b["name"] == FALLBACK else b["distribution"]
        print(f"  backend {b['name']} ({made} {b['version']}; here: {here})")
    for u in info["units"]:
        print(f"  unit {u['name']} on {u['backend']}: {u['size'] / 1024:.1f} KiB")
    stamp = info["stamp"]
    if stamp:
        print(f"  built on: {stamp.get('cpu', '?')}, Python {stamp.get('python', '?')}")
    print(f"  native code: {info['native_code']}")
    for problem in info["problems"]:
        print(f"  would not run here: {problem}")
    if info["runs_here"]:
        print("  runs here: yes")
    return 0 if info["runs_here"] else 1


# Under the cache root, what ``byoc cache clear --all`` keeps: downloaded and exported models,
# and the venv bench/exported_models.py exports them with (about 6 GB).
_KEPT = ("models", "zoo", "export-venv")


def cmd_cache(args: argparse.Namespace) -> int:
    """``byoc cache clear``: forget measured placement's verdicts and the plans (and their
    checks' verdicts) ``byoc.InferenceSession`` saved (and, with ``--all``, the compiled
    libraries and the backends' other verdicts), so that the next compile measures (and
    builds) again."""
    import shutil

    from byoc.placement import cache_root
    from byoc.session import plans_dir

    root = cache_root().parent
    targets = [p for p in root.iterdir() if p.is_dir()] if args.all and root.is_dir() else []
    targets = [p for p in targets if p.name not in _KEPT] or [cache_root(), plans_dir()]
    for path in targets:
        shutil.rmtree(path, ignore_errors=True)
        print(f"removed {path}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    with _progress(args) as progress:
        compiled = byoc.compile(args.model, _config(args), progress=progress)
    if args.output:
        path = compiled.save(args.output)
        if not args.quiet:
            size = path.stat().st_size
            print(f"wrote {path} ({len(compiled.steps)} units, {size / 1024:.1f} KiB)")
        if compiled.plan is not None and not compiled.plan.partitions:
            print(
                f"byoc: note: no backend runs any of this model: {path} runs it on onnxruntime "
                "(`byoc explain` says why)",
                file=sys.stderr,
            )
    if args.dump_dir:
        os.makedirs(args.dump_dir, exist_ok=True)
        for step in compiled.steps:
            source = getattr(step.artifact, "source", None)
            if isinstance(source, str):
                suffix = getattr(step.artifact, "suffix", ".txt")
                path = Path(args.dump_dir) / f"{step.unit.name}{suffix}"
                path.write_text(source)
                print(f"wrote {path}")
    if not args.dump_dir and not args.output and compiled.plan is not None:
        print(compiled.plan.table())
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from byoc.bench import bench

    with _progress(args) as progress:
        report = bench(
            args.model, _config(args), runs=args.runs, warmup=args.warmup, progress=progress
        )
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    try:
        from byoc.ray import check_address, run_batch
    except ImportError as exc:
        raise ByocError(
            f"byoc batch runs on Ray, which is not installed ({exc}): pip install 'byoc[ray]'"
        ) from None
    # what would stop the run fails before compiling
    check_counts(
        workers=args.workers,
        threads=args.threads,
        batch_size=args.batch_size,
        max_sample_mb=args.max_sample_mb,
    )
    sample_files(args.inputs)
    check_outputs(args.outputs, args.inputs)
    if args.address:
        check_address(args.address)
    with tempfile.TemporaryDirectory(prefix="byoc-batch-") as tmp:
        model = args.model
        if not is_artifact(model):  # compiled once, here, with a progress bar of its own
            with _progress(args) as progress:
                compiled = byoc.compile(model, args.config, progress=progress)
            model = compiled.save(Path(tmp) / "model.byoc")
        with _progress(args, "running") as progress:
            report = run_batch(
                model,
                args.inputs,
                args.outputs,
                address=args.address,
                workers=args.workers,
                threads=args.threads,
                batch_size=args.batch_size,
                max_sample_mb=args.max_sample_mb,
                progress=progress,
            )
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0 if report.passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="byoc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"byoc {byoc.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str, fn: Any, help: str, model: bool = True, artifact: bool = False
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        if model:
            what = "an ONNX model, or a .byoc file" if artifact else "an ONNX model file"
            p.add_argument("model", help=what)
            p.add_argument("-c", "--config", help="byoc.toml or pyproject.toml with [tool.byoc]")
        if model and name != "batch":
            p.add_argument(
                "--remeasure",
                action="store_true",
                help="measured placement: time every partition again, not from the cache",
            )
        return p

    p = add("backends", cmd_backends, "list installed backends", model=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("partition", cmd_partition, "print the partition plan")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (--format json)")
    p.add_argument(
        "--format",
        choices=["table", "json", "dot", "svg"],
        default="table",
        help="table (default), json, dot (Graphviz source) or svg (a picture of the plan)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every unit and every placement verdict"
    )
    p = add("explain", cmd_explain, "say for every node who claimed it, or why not")
    p.add_argument("--backend", metavar="NAME", help="only this backend's partitions and reasons")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="after the summary, every node and verdict"
    )
    p.add_argument("--node", metavar="NAME", help="only this node: who runs it, every reason")
    p.add_argument("--json", action="store_true", help="print one entry per node as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p = add("compare", cmd_compare, "compare outputs with onnxruntime (exit 1 on mismatch)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help=INPUT_HELP)
    p.add_argument(
        "--require-backend",
        action="store_true",
        help="exit 1 when no backend ran (placement sent everything to onnxruntime): for CI",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p = add(
        "run",
        cmd_run,
        "run an ONNX model or a .byoc file (random inputs unless --input)",
        artifact=True,
    )
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help=INPUT_HELP)
    p.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="save outputs as DIR/NAME.npy (a sequence of tensors: .npz; a map: .json)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--trust-native",
        action="store_true",
        help="a .byoc file: use the compiled code it carries (for a machine without a "
        "compiler) instead of rebuilding it from source",
    )
    p = add("inspect", cmd_inspect, "what a .byoc file holds, and whether it runs here, without "
            "loading any of its code", model=False)  # fmt: skip
    p.add_argument("file", help=".byoc file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("cache", cmd_cache, "clear byoc's cache: measured placement's verdicts", model=False)
    p.add_argument(
        "action", choices=["clear"], help="clear: remove the cached verdicts and sessions' plans"
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="also the compiled libraries and the backends' verdicts (not the models)",
    )
    p = add("compile", cmd_compile, "compile a model; -o saves it as one .byoc file")
    p.add_argument("-o", "--output", metavar="FILE.byoc", help="save the compiled model here")
    p.add_argument("--dump-dir", metavar="DIR", help="write each partition's source here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no notes")
    p = add("bench", cmd_bench, "time byoc against onnxruntime, per partition and segment")
    p.add_argument("--runs", type=int, default=20, help="timed runs of each (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--json", action="store_true", help="print the timings as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p = add(
        "batch",
        cmd_batch,
        "run a model over a directory of .npz samples on Ray workers",
        artifact=True,
    )
    p.epilog = (
        "A sample that fails (a bad file, a failed run, a crash of its worker) is reported and "
        "written nowhere: an output an earlier run left for it in --outputs is removed. A "
        "sample that crashes its worker fails alone; the others of its batch are rerun."
    )
    p.add_argument("--inputs", required=True, metavar="DIR", help="one .npz (or .NPZ) per sample")
    p.add_argument("--outputs", required=True, metavar="DIR", help="one .npz per sample here")
    p.add_argument("--address", help="join this Ray cluster (default: start a local Ray)")
    p.add_argument("--workers", type=int, help="workers (default: CPUs // --threads)")
    p.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    p.add_argument("--batch-size", type=int, default=16, help="samples per call (default 16)")
    p.add_argument(
        "--max-sample-mb",
        type=int,
        default=MAX_SAMPLE_MB,
        metavar="MB",
        help="largest sample read, in MiB, counting the inputs with symbolic dims; checked "
        f"before decompressing (default {MAX_SAMPLE_MB})",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"byoc: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        code = int(args.fn(args))
        sys.stdout.flush()  # a closed pipe shows here, not as Python exits
        return code
    except BrokenPipeError:  # `byoc explain M | head -1` ends quietly, like other Unix tools;
        # SIGPIPE stays ignored, so no other pipe (a plugin's worker's) can kill the process
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ByocError as exc:
        print(f"byoc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug in byoc or a plugin: still one line, unless debugging
        if os.environ.get("BYOC_DEBUG"):
            raise
        print(
            f"byoc: internal error: {type(exc).__name__}: {exc} (a bug in byoc or a plugin; "
            "please report it; BYOC_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
