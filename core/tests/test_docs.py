"""The reference docs cover every configuration key and every hook."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from byoc import BackendSpec, Option, backendspec, config, hookspecs
from byoc.plugins import registry

DOCS = Path(__file__).resolve().parents[2] / "docs"


def sections(path: Path) -> dict[str, str]:
    """``## heading`` -> the text under it."""
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def documented(text: str) -> set[str]:
    return set(re.findall(r"^\| `([\w.-]+)` \|", text, flags=re.M))


def test_every_core_key_is_documented():
    docs = sections(DOCS / "configuration.md")
    tables = {
        "Top level": {key: None for key in config.TOP_KEYS},
        "`[fallback]`: onnxruntime": config.FALLBACK_KEYS,
        "`[compare]`": config.COMPARE_KEYS,
        "`[backend.<name>]`: keys every backend has": config.BACKEND_KEYS,
    }
    for name in dir(config):  # tables added later ([compile], ...) need a section too
        match = re.fullmatch(r"([A-Z]+)_KEYS", name)
        if match and name not in ("TOP_KEYS", "FALLBACK_KEYS", "BACKEND_KEYS"):
            tables.setdefault(f"`[{match[1].lower()}]`", getattr(config, name))
    for heading, keys in tables.items():
        assert heading in docs, f"docs/configuration.md has no section '## {heading}'"
        missing = set(keys) - documented(docs[heading])
        assert not missing, f"undocumented keys in '## {heading}': {sorted(missing)}"


def test_every_backend_option_is_documented():
    docs = sections(DOCS / "configuration.md")
    for backend in registry().claimable():
        heading = f"`[backend.{backend.name}]`"
        assert heading in docs, f"docs/configuration.md has no section '## {heading}'"
        missing = set(backend.options) - documented(docs[heading])
        assert not missing, f"undocumented keys of backend {backend.name}: {sorted(missing)}"


def test_every_hook_is_documented():
    docs = sections(DOCS / "hooks.md")
    for name in (n for n in dir(hookspecs) if n.startswith("byoc_")):
        assert f"`{name}`" in docs, f"docs/hooks.md has no section '## `{name}`'"


def test_every_hook_docstring_is_in_its_section():
    docs = sections(DOCS / "hooks.md")
    for name in (n for n in dir(hookspecs) if n.startswith("byoc_")):
        doc = inspect.cleandoc(getattr(hookspecs, name).__doc__)
        assert doc in docs[f"`{name}`"], f"docs/hooks.md's '## `{name}`' is not its docstring"


def test_every_backend_spec_field_is_documented():
    for cls in (BackendSpec, Option):
        fields = {f.name for f in dataclasses.fields(cls)}
        described = set(backendspec.field_docs(cls))
        assert fields - described == set(), f"{cls.__name__} fields without ':ivar:' text"
        assert described - fields == set(), f"{cls.__name__} ':ivar:' text of no field"


@pytest.mark.parametrize("doc", ["hooks.md", "plugin-authors.md"])
def test_the_field_tables_are_the_generated_ones(doc):
    assert backendspec.reference() in (DOCS / doc).read_text(), (
        f"docs/{doc}'s BackendSpec and Option tables differ from the fields: replace them "
        "with the output of: python -c 'from byoc import backendspec; "
        "print(backendspec.reference())'"
    )
