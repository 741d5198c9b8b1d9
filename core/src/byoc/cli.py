"""The ``byoc`` command line. Errors print one line and exit 2; a failed comparison exits 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import byoc
from byoc.errors import ByocError, InputError
from byoc.plugins import registry


def _inputs(pairs: Sequence[str] | None) -> dict[str, np.ndarray] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--input takes NAME=FILE.npy, got {pair!r}")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read input '{name}' from {path}: {exc}") from None
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
                else [p[0] for p in reg.pattern_table(b.name, _defaults(b))]
                if b.name != "onnxruntime"
                else [],
                "description": b.description,
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
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        state = "available" if r["available"] else f"UNAVAILABLE: {r['reason']}"
        print(f"{r['name']}  ({r['distribution']} {r['version']})  {state}")
        if r["description"]:
            print(f"    {r['description']}")
        if r["ops"]:
            print(f"    claims: {', '.join(r['ops'])}")
        if r["patterns"]:
            print(f"    patterns: {', '.join(r['patterns'])}")
    return 0


def _defaults(b: Any) -> dict[str, Any]:
    return byoc.Config().backend_table(b.name, b.options)


def cmd_partition(args: argparse.Namespace) -> int:
    plan = byoc.partition(args.model, args.config)
    print(json.dumps(plan.to_json(), indent=2) if args.json else plan.table())
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    plan = byoc.partition(args.model, args.config)
    for name, d in plan.decisions.items():
        where = d.owner + (f" as {d.composite}" if d.composite else "")
        print(f"{name}: {where}")
        for backend, reason in d.refusals:
            if args.backend in (None, backend, "*"):
                print(f"    {backend}: {reason}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    report = byoc.compare(args.model, args.config, _inputs(args.input))
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0 if report.passed else 1


def cmd_run(args: argparse.Namespace) -> int:
    inputs = _inputs(args.input)
    compiled = byoc.compile(args.model, args.config)
    if inputs is None:
        cfg = byoc.load_config(args.config)
        inputs = byoc.random_inputs(compiled.plan.model, cfg.shapes, cfg.compare["seed"])
    outputs = compiled.run(inputs)
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    for name, value in outputs.items():
        summary = f"{name}: {value.dtype}{list(value.shape)}"
        if value.size and value.dtype.kind in "fiub":
            summary += f" min {value.min():.6g} max {value.max():.6g} mean {value.mean():.6g}"
        print(summary)
        if args.output:
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            np.save(Path(args.output) / f"{safe}.npy", value)
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    compiled = byoc.compile(args.model, args.config)
    if args.dump_dir:
        os.makedirs(args.dump_dir, exist_ok=True)
        for step in compiled.steps:
            source = getattr(step.artifact, "source", None)
            if isinstance(source, str):
                suffix = getattr(step.artifact, "suffix", ".txt")
                path = Path(args.dump_dir) / f"{step.unit.name}{suffix}"
                path.write_text(source)
                print(f"wrote {path}")
    if not args.dump_dir:
        print(compiled.plan.table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="byoc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"byoc {byoc.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Any, help: str, model: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        if model:
            p.add_argument("model", help="ONNX model file")
            p.add_argument("-c", "--config", help="byoc.toml or pyproject.toml with [tool.byoc]")
        return p

    p = add("backends", cmd_backends, "list installed backends", model=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("partition", cmd_partition, "print the partition plan")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p = add("explain", cmd_explain, "say for every node who claimed it, or why not")
    p.add_argument("--backend", help="only this backend's reasons")
    p = add("compare", cmd_compare, "compare outputs with onnxruntime (exit 1 on mismatch)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = add("run", cmd_run, "run a model (random inputs unless --input is given)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    p.add_argument("-o", "--output", metavar="DIR", help="save outputs as DIR/NAME.npy")
    p = add("compile", cmd_compile, "compile a model; --dump-dir writes each artifact's source")
    p.add_argument("--dump-dir", metavar="DIR", help="write each partition's source here")
    return parser


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"byoc: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return int(args.fn(args))
    except ByocError as exc:
        print(f"byoc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
