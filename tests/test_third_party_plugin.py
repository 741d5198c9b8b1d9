"""A plugin byoc has never heard of: built into a wheel, pip-installed into a fresh virtual
environment, found through its entry point, and used by ``byoc partition``."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import onnx
from byoc.testing.build import make_model, node

PLUGIN = Path(__file__).parent / "third_party_plugin"


def run(*args, **kwargs):
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, **kwargs
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


def test_a_pip_installed_plugin_is_discovered_and_claims_nodes(tmp_path):
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", PLUGIN)
    (wheel,) = (tmp_path / "dist").glob("byoc_thirdparty_demo-0.3.0-*.whl")

    # A fresh environment that sees byoc and its dependencies from the project's environment
    # (an import line in a .pth file adds that site dir, editable installs included).
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
    here = sysconfig.get_path("purelib")
    Path(purelib.stdout.strip(), "project-env.pth").write_text(
        f"import site; site.addsitedir({here!r})\n"
    )
    run(*pip, "--python", python, "install", "--no-deps", "--no-index", wheel)

    listed = run(python, "-m", "byoc.cli", "backends", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["thirdparty"]["distribution"] == "byoc-thirdparty-demo"
    assert rows["thirdparty"]["version"] == "0.3.0"
    assert rows["thirdparty"]["ops"] == ["Neg"]
    # the project's own environment does not have it: discovery found the new install
    mine = run(sys.executable, "-m", "byoc.cli", "backends", "--json")
    assert "thirdparty" not in {r["name"] for r in json.loads(mine.stdout)}

    model = make_model([node("Neg", ["x"], "n"), node("Exp", ["n"], "e")], {"x": [2, 3]}, ["e"])
    onnx.save(model, tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text(
        'backends = ["thirdparty"]\n[compile]\nplacement = "static"\n'
    )
    cfg = tmp_path / "byoc.toml"
    plan = run(python, "-m", "byoc.cli", "partition", tmp_path / "m.onnx", "-c", cfg, "--json")
    assert json.loads(plan.stdout)["partitions"] == [
        {
            "name": "thirdparty_0",
            "backend": "thirdparty",
            "nodes": ["n"],
            "inputs": ["x"],
            "outputs": ["n"],
        }
    ]
    run(python, "-m", "byoc.cli", "compare", tmp_path / "m.onnx", "-c", cfg)
