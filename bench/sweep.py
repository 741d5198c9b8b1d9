"""byoc compare on every model of bench/sweep_models.py, under each config: a correctness sweep.

    .venv/bin/python bench/sweep.py                            # every built model, every config
    .venv/bin/python bench/sweep.py --models 'crnn-*,*-qdq' --configs default,dnnl
    .venv/bin/python bench/sweep.py --list                     # the models and the configs
    .venv/bin/python bench/sweep.py --table FILE               # a saved run's table again

Build the models first: ``python bench/sweep_models.py`` (``make sweep-models``). Configs:
``default`` (no ``backends`` key: every installed backend with measured placement, what a user
gets) and each installed backend alone (its ``byoc.backends`` entry point) with ``placement =
"static"``: every partition the backend claims is kept, so that what is compared is the
backend itself, with no measurement to send a wrong partition back to onnxruntime. A ``-dyn``
model's ``[shapes]`` (its recipe's ``Dynamic.shapes``) go into its config.

Each (model, config) runs ``byoc compare MODEL -c CONFIG -q --json`` (random inputs, compare's
own tolerance) in a process of its own, one at a time, killed after ``--timeout`` seconds:
PASS (exit 0), FAIL (exit 1: an output differs from onnxruntime's), ERROR (any other exit, or
no report), TIMEOUT. Output: the configs and one JSON line per run (command, exit code,
seconds, compare's report, the end of stderr) under
``user_cache_dir("byoc")/zoo/sweep/<recipe>/runs/``; progress on stderr; on stdout a table,
model x config, of the verdict, the largest max abs error over the outputs and the nodes each
backend ran, then every run that did not pass, with its reason and its command.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import sweep_models  # beside this file; imports nothing outside the standard library
from zoo import select

FALLBACK = "onnxruntime"


def configs() -> dict[str, str]:
    """Config name -> byoc.toml text: ``default``, then each installed backend alone."""
    found = {"default": "# every installed backend, measured placement\n"}
    for ep in sorted(entry_points(group="byoc.backends"), key=lambda e: e.name):
        found[ep.name] = f'backends = ["{ep.name}"]\n\n[compile]\nplacement = "static"\n'
    return found


def config_file(directory: Path, config: str, text: str, model: str) -> Path:
    """``<config>.toml``; a model with ``[shapes]`` gets its own, ``<config>.<model>.toml``."""
    shapes = sweep_models.shapes(model)
    path = directory / (f"{config}.{model}.toml" if shapes else f"{config}.toml")
    if shapes:
        text += "\n[shapes]\n" + "".join(f"{json.dumps(k)} = {v}\n" for k, v in shapes.items())
    path.write_text(text)
    return path


def byoc_command() -> str:
    beside = Path(sys.executable).with_name("byoc")
    found = str(beside) if beside.exists() else shutil.which("byoc")
    if not found:
        raise SystemExit(
            f"no byoc command beside {sys.executable} or on PATH: run this with the project's "
            ".venv/bin/python (`make test` makes it)"
        )
    return found


def run(command: list[str], timeout: float) -> dict[str, Any]:
    """Run one ``byoc compare`` (``--json`` added); the record of it."""
    start = time.perf_counter()
    record: dict[str, Any] = {"command": command}
    try:
        done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        record.update(status="TIMEOUT", reason=f"killed after {timeout:g} s")
    else:
        record.update(returncode=done.returncode, stderr=done.stderr[-3000:])
        try:
            report = json.loads(done.stdout) if done.returncode in (0, 1) else None
        except ValueError:  # something other than the report on stdout
            report = None
        if report is None and done.returncode in (0, 1):
            first = (done.stdout.strip().splitlines() or ["nothing"])[0][:200]
            record.update(status="ERROR", reason=f"no report on stdout, but: {first}")
        elif report is None:
            record.update(status="ERROR", reason=_last_line(done.stderr, done.returncode))
        else:
            status = "PASS" if report["passed"] else "FAIL"
            record.update(status=status, reason=_error(_worst(report)), report=report)
    record["seconds"] = round(time.perf_counter() - start, 1)
    return record


def _last_line(stderr: str, returncode: int) -> str:
    """The error byoc printed last (colour codes removed), or the exit code."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", stderr).splitlines()]
    return ([line for line in lines if line] or [f"exit {returncode}, nothing on stderr"])[-1][:300]


def _worst(report: dict[str, Any]) -> dict[str, Any] | None:
    """The output furthest from onnxruntime's (NaN first) of a compare report."""
    return max(
        report["outputs"],
        key=lambda o: math.inf if math.isnan(o["max_abs_error"]) else o["max_abs_error"],
        default=None,
    )


def _error(output: dict[str, Any] | None) -> str:
    if output is None:
        return "no outputs"
    abs_, rel = output["max_abs_error"], output["max_rel_error"]
    return f"{output['name']}: max abs {abs_:.3g}, max rel {rel:.3g}"


def cell(record: dict[str, Any] | None) -> str:
    """``PASS 3e-06 dn129 ort4``: the verdict, the largest max abs error, nodes per backend."""
    if record is None:
        return "-"
    report = record.get("report")
    if report is None:
        return record["status"]
    worst = _worst(report)
    error = f"{worst['max_abs_error']:.0e}" if worst else "-"
    ran = sorted(report["ran"].items(), key=lambda item: item[0] == FALLBACK)
    return f"{record['status']} {error} " + " ".join(f"{_short(b)}{n}" for b, n in ran)


def _short(backend: str) -> str:
    return "ort" if backend == FALLBACK else backend[:2]


def table(records: list[dict[str, Any]]) -> list[str]:
    """Model x config cells, a legend, then every run that did not pass and its command."""
    models = list(dict.fromkeys(r["model"] for r in records))
    names = list(dict.fromkeys(r["config"] for r in records))
    last = {(r["model"], r["config"]): r for r in records}
    rows = [["model", *names]]
    rows += [[m, *(cell(last.get((m, c))) for c in names)] for m in models]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    backends = sorted({b for r in records for b in r.get("report", {}).get("ran", {})})
    legend = ", ".join(f"{_short(b)} {b}" for b in backends)
    lines += ["", f"cells: verdict, largest max abs error, nodes each ran ({legend})"]
    failed = [r for r in last.values() if r["status"] != "PASS"]
    lines += ["", f"{len(failed)} of {len(last)} runs did not pass" + (":" if failed else "")]
    for r in failed:
        lines.append(f"  {r['model']}  {r['config']}  {r['status']}: {r['reason']}")
        lines.append(f"    {shlex.join(r['command'])}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names or globs (default: all built)")
    parser.add_argument("--configs", help="comma-separated names or globs (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--list", action="store_true", help="list the models and configs, exit")
    parser.add_argument("--table", type=Path, help="print the table of a run's file and exit")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(table([json.loads(line) for line in args.table.read_text().splitlines()])))
        return 0
    known = configs()
    chosen = select(list(known), args.configs, "config")
    built = sweep_models.manifest()
    models = select(list(sweep_models.sweep_names()), args.models, "model")
    if args.list:
        print(f"models of recipe {sweep_models.recipe_key()}: {sweep_models.out_dir()}")
        for name in models:
            status = built.get(name, {}).get("status", "not built")
            shapes = " ".join(f"{k}={v}" for k, v in sweep_models.shapes(name).items())
            print(f"{name:26s} {status:9s} {shapes}".rstrip())
        print(f"configs: {', '.join(chosen)}")
        return 0
    ready = [m for m in models if built.get(m, {}).get("status") == "ok"]
    if len(ready) < len(models):
        missing = ", ".join(m for m in models if m not in ready)
        print(f"not built (python bench/sweep_models.py), skipped: {missing}", file=sys.stderr)
    if not ready:
        raise SystemExit("no model to run: build them with python bench/sweep_models.py")
    byoc = byoc_command()
    runs = sweep_models.out_dir() / "runs"
    (runs / "configs").mkdir(parents=True, exist_ok=True)
    out = runs / f"{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    print(f"{len(ready)} models x {len(chosen)} configs; writing {out}", file=sys.stderr)
    records = []
    for model in ready:
        path = sweep_models.out_dir() / f"{model}.onnx"
        for config in chosen:
            cfg = config_file(runs / "configs", config, known[config], model)
            record: dict[str, Any] = {"model": model, "config": config}
            record |= run([byoc, "compare", str(path), "-c", str(cfg), "-q"], args.timeout)
            with out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            records.append(record)
            line = f"{model:26s} {config:12s} {record['seconds']:6.1f} s  {cell(record)}"
            print(line, file=sys.stderr, flush=True)
    print("\n".join(table(records)))
    print(f"\nruns: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
