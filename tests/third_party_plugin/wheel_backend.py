"""A minimal PEP 517 build backend: packs ``src/*`` and the pyproject metadata into a wheel."""

from __future__ import annotations

import base64
import hashlib
import os
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent


def _files(dist_info: str) -> dict[str, bytes]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    files = {
        str(p.relative_to(ROOT / "src")): p.read_bytes()
        for p in sorted((ROOT / "src").rglob("*.py"))
    }
    meta = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        *(f"Requires-Dist: {d}" for d in project.get("dependencies", [])),
    ]
    files[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: wheel_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    groups = project.get("entry-points", {})
    text = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
        for group, eps in groups.items()
    )
    files[f"{dist_info}/entry_points.txt"] = text.encode()
    return files


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Write the wheel into ``wheel_directory``; return its file name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = project["name"].replace("-", "_")
    dist_info = f"{name}-{project['version']}.dist-info"
    wheel = f"{name}-{project['version']}-py3-none-any.whl"
    files = _files(dist_info)
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel
