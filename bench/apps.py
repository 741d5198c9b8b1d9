"""Apps written for onnxruntime.InferenceSession, run as they are and through byoc.InferenceSession.

    .venv/bin/python bench/apps.py                       # the three apps, 3 rounds
    .venv/bin/python bench/apps.py --apps vad --rounds 5 --passes 5

Three app-shaped workloads on real models (MODELS.md), each a "pass" of calls as the app makes
them, with symbolic dims and no ``[shapes]``:

- ``ocr``: a detector + recognizer pipeline: for each of three page sizes (multiples of 32, as
  OCR apps round them), the PP-OCRv4 detector (P2) on the page, the direction classifier (P1) on
  a batch of 6 line crops 48x192, and the recognizer (P3) on 6 crops 48 high whose width
  follows the page (crops padded to a multiple of 32);
- ``vad``: a streaming voice detector (Silero VAD, P4): 250 tiny calls of a 576-sample window
  (64 samples of context and 512 new), carrying its recurrent state from call to call;
- ``embed``: a sentence-embedding service (MiniLM-L3, P5): requests of batch 1, 4 and 16 with
  token lengths padded to 32 or 128.

Each (app, mode) runs in its own process, the two modes alternated ``--rounds`` times: ``ort``
builds ``onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])``; ``byoc``
builds ``byoc.InferenceSession(path)`` with the default config (or ``--config``). A process
times its import of byoc or onnxruntime and the sessions' creation (start-up), its first call,
runs ``--warm`` passes (byoc then passes, up to ``--settle`` more, until no plan is compiling
or being checked against onnxruntime: its background work is not in the steady state), then
times ``--passes`` passes: the steady state is their median. Plans are kept in byoc's user cache
dir, so rounds after the first start warm, as an app's next process does. Outputs of the last
pass are compared (``[compare]`` default tolerances). Printed: per app, the medians over rounds of
start-up (seconds, and byoc's extra), first call and steady state (ms), their byoc/ort ratios,
whether outputs match, which signatures byoc planned on a backend, and in how many rounds a
plan was still compiling or checked when ``--settle`` ran out (its steady state then says little).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import print_machine

Call = tuple[str, dict[str, np.ndarray]]  # (model id, feed)


def ocr_calls(rng: np.random.Generator) -> Iterator[Call]:
    for h, w in ((640, 640), (480, 640), (736, 544)):
        yield "P2", {"x": rng.random((1, 3, h, w), np.float32)}
        yield "P1", {"x": rng.random((6, 3, 48, 192), np.float32)}
        yield "P3", {"x": rng.random((6, 3, 48, w // 2), np.float32)}


def vad_calls(rng: np.random.Generator) -> Iterator[Call]:
    state = np.zeros((2, 1, 128), np.float32)
    sr = np.array(16000, np.int64)
    for _ in range(250):  # the state is the previous call's: vad_run feeds it back
        yield (
            "P4",
            {"input": rng.standard_normal((1, 576)).astype(np.float32), "state": state, "sr": sr},
        )


def embed_calls(rng: np.random.Generator) -> Iterator[Call]:
    for batch, length in ((1, 32), (4, 128), (16, 32), (1, 128), (4, 32), (16, 128)):
        ids = rng.integers(1000, 30000, (batch, length)).astype(np.int64)
        ids[:, 0], ids[:, -1] = 101, 102
        yield "P5", {"input_ids": ids, "attention_mask": np.ones((batch, length), np.int64)}


APPS: dict[str, Callable[[np.random.Generator], Iterator[Call]]] = {
    "ocr": ocr_calls,
    "vad": vad_calls,
    "embed": embed_calls,
}


def child(app: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One process: start-up, first call, warm passes, timed passes; outputs of the last."""
    paths = json.loads(args.paths)
    started = time.perf_counter()  # the import is the app's start-up too
    if mode == "byoc":
        import logging

        import byoc

        logging.basicConfig(format="%(message)s")  # the session's verdicts, for --why
        logging.getLogger("byoc.session").setLevel(logging.INFO)

        sessions = {m: byoc.InferenceSession(p, config=args.config) for m, p in paths.items()}
    else:
        import onnxruntime as ort

        sessions = {
            m: ort.InferenceSession(p, providers=["CPUExecutionProvider"]) for m, p in paths.items()
        }
    startup = time.perf_counter() - started

    def one_pass() -> list[np.ndarray]:
        outputs: list[np.ndarray] = []
        state = None
        for model, feed in APPS[app](np.random.default_rng(1)):
            if "state" in feed and state is not None:
                feed["state"] = state
            result = sessions[model].run(None, feed)
            if model == "P4":
                state = result[1]
            outputs.append(result[0])
        return outputs

    first_model, first_feed = next(APPS[app](np.random.default_rng(1)))
    started = time.perf_counter()
    sessions[first_model].run(None, first_feed)
    first = time.perf_counter() - started
    for _ in range(args.warm):
        one_pass()
    planned: list[str] = []
    unsettled = 0  # byoc: passes it took past --settle with plans still compiling or checked
    if mode == "byoc":  # warm: pass and wait until no plan is compiling or being checked
        unsettled = 1
        for _ in range(args.settle):
            before = [s.plans() for s in sessions.values()]
            for s in sessions.values():
                s.wait()
            one_pass()
            after = [s.plans() for s in sessions.values()]
            busy = {"compiling", "checking"} & {v for p in after for v in p.values()}
            if after == before and not busy:
                unsettled = 0
                break
        for model, s in sessions.items():
            planned += [f"{model} {list(sig)}" for sig, how in s.plans().items() if how == "byoc"]
    times = []
    for _ in range(args.passes):
        started = time.perf_counter()
        outputs = one_pass()
        times.append(time.perf_counter() - started)
    out = Path(args.out) / f"{app}-{mode}.npz"
    np.savez(out, *outputs)
    return {
        "startup": startup,
        "first": first,
        "steady": statistics.median(times),
        "planned": planned,
        "unsettled": unsettled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument(
        "--settle", type=int, default=40, help="byoc: at most this many more warm passes"
    )
    parser.add_argument("--why", action="store_true", help="print the session's verdicts")
    parser.add_argument("--config", default=None, help="byoc's config (default: the defaults)")
    parser.add_argument("--child", nargs=2, metavar=("APP", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args)))
        return
    print_machine()
    print(f"rounds {args.rounds}, warm passes {args.warm}, timed passes {args.passes}")
    print(
        f"{'app':6s} {'start-up s (ort, +byoc)':>24s} {'first call':>11s} {'steady ms (ort)':>16s}"
        f" {'steady':>7s}  outputs"
    )
    for app in args.apps.split(","):
        from byoc.testing.models import fetch

        models = {c[0] for c in APPS[app](np.random.default_rng(0))}
        paths = json.dumps({m: str(fetch(m)) for m in models})
        results: dict[str, list[dict[str, Any]]] = {"ort": [], "byoc": []}
        why: list[str] = []
        with tempfile.TemporaryDirectory() as out:
            for r in range(args.rounds):
                for mode in ("ort", "byoc") if r % 2 == 0 else ("byoc", "ort"):
                    cmd = [sys.executable, __file__, "--child", app, mode, "--out", out]
                    cmd += ["--warm", str(args.warm), "--passes", str(args.passes)]
                    cmd += ["--settle", str(args.settle)]
                    cmd += ["--paths", paths]
                    if args.config:
                        cmd += ["--config", args.config]
                    done = subprocess.run(cmd, capture_output=True, text=True)
                    if done.returncode:
                        sys.exit(f"{app} {mode} failed:\n{done.stderr[-3000:]}")
                    results[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
                    why += [ln for ln in done.stderr.splitlines() if ln.startswith("byoc: ")]
            match = _match(Path(out) / f"{app}-byoc.npz", Path(out) / f"{app}-ort.npz")
        med = {
            m: {k: statistics.median(r[k] for r in rs) for k in ("startup", "first", "steady")}
            for m, rs in results.items()
        }
        o, b = med["ort"], med["byoc"]
        print(
            f"{app:6s} {o['startup']:12.2f} {b['startup'] - o['startup']:+11.2f}"
            f" {b['first'] / o['first']:11.2f} {o['steady'] * 1e3:16.2f}"
            f" {b['steady'] / o['steady']:7.3f}  {match}"
        )
        planned = sorted({p for r in results["byoc"] for p in r["planned"]})
        print(f"       byoc plans on a backend: {'; '.join(planned) or 'none'}")
        unsettled = sum(r["unsettled"] for r in results["byoc"])
        if unsettled:  # its steady state then holds checks' calls or a compile beside them
            print(
                f"       unsettled: in {unsettled} of {len(results['byoc'])} rounds a plan was "
                f"still compiling or checked after --settle {args.settle} passes"
            )
        if args.why:  # what each signature's compile and check decided, in every round
            print("\n".join(f"       {line}" for line in why))


def _match(byoc_file: Path, ort_file: Path) -> str:
    got, want = np.load(byoc_file), np.load(ort_file)
    worst = 0.0
    for key in want.files:
        g, w = got[key].astype(np.float64), want[key].astype(np.float64)
        if g.shape != w.shape:
            return f"differ ({key}: shape {g.shape} vs {w.shape})"
        worst = max(worst, float(np.max(np.abs(g - w) - 1e-4 * np.abs(w), initial=0.0)))
    return "match" if worst <= 1e-4 else f"differ (excess {worst:.2g})"


if __name__ == "__main__":
    main()
