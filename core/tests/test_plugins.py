"""Plugin discovery through entry points, BYOC_PLUGINS, and duplicate names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import byoc
import numpy as np
import pytest
from byoc import plugins
from byoc.testing.build import make_model, node


def run_backends(env_extra=None, pythonpath=None):
    env = dict(os.environ)
    env.pop("BYOC_PLUGINS", None)
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "byoc.cli", "backends", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def names(done):
    assert done.returncode == 0, done.stderr
    return [r["name"] for r in json.loads(done.stdout)]


def test_byoc_plugins_selects_backends():
    assert "examplejson" in names(run_backends())
    assert names(run_backends({"BYOC_PLUGINS": ""})) == ["onnxruntime"]
    assert names(run_backends({"BYOC_PLUGINS": "examplejson"})) == ["onnxruntime", "examplejson"]


def fake_distribution(root, dist, module, backend_name, body):
    info = root / f"{dist.replace('-', '_')}-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[byoc.backends]\n{backend_name} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(body))


def test_a_second_distribution_claiming_a_name_fails_naming_both(tmp_path):
    fake_distribution(
        tmp_path,
        "byoc-impostor",
        "impostor",
        "examplejson",
        """
        import byoc
        @byoc.hookimpl
        def byoc_register_backends(register):
            register(byoc.BackendSpec("examplejson"))
    """,
    )
    done = run_backends(pythonpath=tmp_path)
    assert done.returncode == 2
    assert "byoc-examplejson" in done.stderr and "byoc-impostor" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_plugin_that_fails_to_import_is_shown_and_the_rest_works(tmp_path):
    fake_distribution(
        tmp_path, "byoc-broken", "broken_plugin", "broken", "raise ImportError('needs libfoo.so')\n"
    )
    done = run_backends(pythonpath=tmp_path)
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["broken"]["available"] is False
    assert "needs libfoo.so" in rows["broken"]["reason"]
    assert rows["examplejson"]["available"] is True


def test_a_misspelled_hook_or_a_malformed_spec_makes_the_plugin_broken_naming_it(tmp_path):
    fake_distribution(
        tmp_path,
        "byoc-sloppy",
        "sloppy",
        "sloppy",
        """
        import byoc
        @byoc.hookimpl
        def byoc_register_backends(register):
            register(byoc.BackendSpec("sloppy", options={"threads": byoc.Option(str, "", "t")}))
    """,
    )
    fake_distribution(
        tmp_path,
        "byoc-typo",
        "typo_plugin",
        "typo",
        """
        import byoc
        @byoc.hookimpl
        def byoc_register_backends(register):
            register(byoc.BackendSpec("typo"))
        @byoc.hookimpl
        def byoc_suported_ops(backend, config):
            return {"Neg": None}
    """,
    )
    done = run_backends(pythonpath=tmp_path)
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["typo"]["available"] is False
    assert "byoc_suported_ops (misspelled?)" in rows["typo"]["reason"]
    assert "byoc_supported_ops" in rows["typo"]["reason"]
    assert rows["sloppy"]["available"] is False
    assert "option 'threads' is one every backend has" in rows["sloppy"]["reason"]
    assert rows["examplejson"]["available"] is True
    assert "byoc_codegen" in rows["examplejson"]["hooks"]


def test_byoc_trace_logs_hook_calls(tmp_path):
    done = run_backends({"BYOC_TRACE": "1", "BYOC_PLUGINS": "examplejson"})
    assert done.returncode == 0
    assert "byoc_supported_ops" in done.stderr  # pluggy's trace: each call, its arguments


def run_script(script, pythonpath):
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


def test_a_discovered_third_party_backend_claims_nodes(tmp_path):
    fake_distribution(
        tmp_path,
        "byoc-negator",
        "negator",
        "negator",
        """
        import numpy as np
        import byoc

        @byoc.hookimpl
        def byoc_register_backends(register):
            register(byoc.BackendSpec("negator", description="claims Neg"))

        @byoc.hookimpl
        def byoc_supported_ops(backend, config):
            return {"Neg": None} if backend == "negator" else None

        class Runtime:
            def run(self, inputs):
                return [np.negative(inputs[0])]

        @byoc.hookimpl
        def byoc_codegen(backend, partition, config):
            return "neg" if backend == "negator" else None

        @byoc.hookimpl
        def byoc_create_runtime(backend, artifact, config):
            return Runtime() if backend == "negator" else None
    """,
    )
    script = textwrap.dedent("""
        import byoc, numpy as np
        from byoc.testing.build import make_model, node
        m = make_model([node("Neg", ["x"], "n"), node("Exp", ["n"], "e")], {"x": [3]}, ["e"])
        cfg = {"backends": ["negator"]}
        plan = byoc.partition(m, cfg)
        print(plan.to_json()["partitions"][0]["nodes"], byoc.compare(m, cfg).passed)
    """)
    done = run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['n']", "True"]


def test_a_tvm_style_two_tuple_pattern_table_makes_a_composite(tmp_path):
    fake_distribution(
        tmp_path,
        "byoc-negexp",
        "negexp",
        "negexp",
        """
        import numpy as np
        import byoc
        from byoc.patterns import op, wildcard

        @byoc.hookimpl
        def byoc_register_backends(register):
            register(byoc.BackendSpec("negexp"))

        @byoc.hookimpl
        def byoc_supported_ops(backend, config):
            return {"Neg": None, "Exp": None} if backend == "negexp" else None

        @byoc.hookimpl
        def byoc_pattern_table(backend, config):  # (name, pattern), as TVM writes it
            if backend == "negexp":
                return [("negexp.neg_any", wildcard()(op("Neg", wildcard())))]

        class Runtime:
            def run(self, inputs):
                return [np.exp(np.negative(inputs[0]))]

        @byoc.hookimpl
        def byoc_codegen(backend, partition, config):
            return "negexp" if backend == "negexp" else None

        @byoc.hookimpl
        def byoc_create_runtime(backend, artifact, config):
            return Runtime() if backend == "negexp" else None
    """,
    )
    script = textwrap.dedent("""
        import byoc
        from byoc.testing.build import make_model, node
        m = make_model([node("Neg", ["x"], "n"), node("Exp", ["n"], "e")], {"x": [3]}, ["e"])
        cfg = {"backends": ["negexp"]}
        plan = byoc.partition(m, cfg)
        print({d.composite for d in plan.decisions.values()}, byoc.compare(m, cfg).passed)
    """)
    done = run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["{'negexp.neg_any'}", "True"]


class _Negs:
    """A backend registered by hand, not through an entry point: claims Neg."""

    class Runtime:
        def run(self, inputs):
            return [np.negative(inputs[0])]

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(byoc.BackendSpec("negs", description="in-process test backend"))

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {"Neg": None} if backend == "negs" else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return "neg" if backend == "negs" else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return self.Runtime() if backend == "negs" else None

    @byoc.hookimpl
    def byoc_serialize(self, backend, artifact):
        return artifact.encode() if backend == "negs" else None

    @byoc.hookimpl
    def byoc_deserialize(self, backend, data):
        if backend != "negs":
            return None
        if data != b"neg":
            raise byoc.ArtifactError("not a negs artifact")
        return "neg"


def test_a_registry_of_ones_own_is_used_from_partition_to_load(tmp_path):
    reg = byoc.Registry(only=[])  # the onnxruntime fallback alone
    reg.add(_Negs())
    assert "negs" not in byoc.registry().backends  # the process-wide registry is untouched
    model = make_model([node("Neg", ["x"], "n"), node("Exp", ["n"], "y")], {"x": [2, 3]}, ["y"])
    config = {"backends": ["negs"], "compile": {"placement": "static"}}
    compiled = byoc.compile(model, config, registry=reg)
    assert [(p.backend, p.nodes) for p in compiled.plan.partitions] == [("negs", ["n"])]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], np.exp(-x), rtol=1e-6)
    assert byoc.compare(model, config, registry=reg).passed
    path = compiled.save(tmp_path / "m.byoc")
    again = byoc.load(path, registry=reg)
    np.testing.assert_allclose(again.run({"x": x})["y"], np.exp(-x), rtol=1e-6)
    with pytest.raises(byoc.ArtifactError, match="negs"):
        byoc.load(path)  # the installed plugins have no 'negs'
    with pytest.raises(byoc.ConfigError, match="unknown backend 'negs'"):
        byoc.partition(model, config)


def test_adding_a_plugin_with_a_misspelled_hook_names_it():
    class Typo:
        @byoc.hookimpl
        def byoc_suported_ops(self, backend, config):
            return None

    reg = byoc.Registry(only=[])
    with pytest.raises(byoc.PluginError, match="byoc_suported_ops"):
        reg.add(Typo())
    assert list(reg.backends) == ["onnxruntime"]


def test_a_reference_backend_claims_only_when_named_and_explain_says_why():
    model = make_model([node("Relu", ["x"], "r"), node("Exp", ["r"], "e")], {"x": [4]}, ["e"])
    reg = plugins.Registry(only=["examplejson"])
    plan = byoc.partition(model, registry=reg)  # no `backends` key: the default set
    assert plan.partitions == []
    assert any(
        b == "examplejson" and "a reference backend" in r for b, r in plan.decisions["r"].refusals
    )
    named = byoc.partition(model, {"backends": ["examplejson"]}, registry=reg)
    assert [p.backend for p in named.partitions] == ["examplejson"]


class Unguarded:
    """A plugin whose hooks never look at the backend name: routing must keep it to its own."""

    def __init__(self, name: str, op: str) -> None:
        self.name, self.op, self.codegens = name, op, []

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(byoc.BackendSpec(self.name))

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {self.op: None}

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        self.codegens.append((backend, partition.name))
        return partition.model

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        import onnxruntime as ort

        session = ort.InferenceSession(artifact.SerializeToString())
        names = [i.name for i in session.get_inputs()]

        def run(_, args):
            return session.run(None, dict(zip(names, args, strict=True)))

        return type("R", (), {"run": run})()


def test_each_hook_call_goes_to_the_plugin_that_owns_the_backend():
    model = make_model([node("Relu", ["x"], "r"), node("Neg", ["r"], "y")], {"x": [4]}, ["y"])
    reg = plugins.Registry(only=[])
    relu, neg = Unguarded("relus", "Relu"), Unguarded("negs", "Neg")
    reg.add(relu, "byoc-relus")
    reg.add(neg, "byoc-negs")
    compiled = byoc.compile(model, {"backends": ["relus", "negs"]}, registry=reg)
    assert [s.unit.backend for s in compiled.steps] == ["relus", "negs"]
    assert relu.codegens == [("relus", "relus_0")] and neg.codegens == [("negs", "negs_0")]
    with pytest.raises(byoc.PluginError, match="no installed plugin registered the backend"):
        reg.route("nosuch")


# -- the backend contract: byoc.BackendSpec and byoc.Option ------------------------------------


class Registering:
    """A plugin whose registration is ``register_with(register)``."""

    def __init__(self, register_with):
        self.register_with = register_with

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        self.register_with(register)


def test_a_spec_is_frozen_and_its_tables_read_only():
    options = {"cache": byoc.Option(str, "", "a cache directory", local_only=True)}
    spec = byoc.BackendSpec("frozen", options=options, exact={"careful": True})
    options["more"] = byoc.Option(int, 0, "added after")  # the spec keeps its own copy
    assert list(spec.options) == ["cache"] and spec.local_options == {"cache"}
    with pytest.raises(AttributeError):
        spec.priority = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.exact["careful"] = False  # type: ignore[index]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: byoc.BackendSpec("bad", priority="3"), "BackendSpec.priority must be an int"),
        (lambda: byoc.BackendSpec("bad", available=None), "available must be a callable"),
        (lambda: byoc.BackendSpec("bad", min_partition_nodes=0), "an int of 1 or more"),
        (lambda: byoc.BackendSpec("", priority=1), "name must be a non-empty str"),
        (lambda: byoc.Option(int, "0", "threads"), "'default' must be int, got '0'"),
        (lambda: byoc.Option(str, "x", "mode", ("a", "b")), "the default 'x' is not one of"),
        (lambda: byoc.Option(int, 0, "n", [0, 1]), "allowed must be a tuple of values or a range"),
        (
            lambda: byoc.BackendSpec("bad", options={"threads": byoc.Option(str, "auto", "t")}),
            "option 'threads' is one every backend has (int, default 0, at least 0)",
        ),
        (
            lambda: byoc.BackendSpec("bad", options={"mode": "fast"}),
            "option 'mode' must be a byoc.Option",
        ),
    ],
)
def test_a_malformed_spec_is_a_plugin_error_naming_the_field(make, message):
    with pytest.raises(byoc.PluginError, match=re.escape(message)):
        make()


def test_a_plugin_registering_a_malformed_spec_leaves_the_registry_as_it_was():
    def register_with(register):
        register(byoc.BackendSpec("first"))
        register(byoc.BackendSpec("second", priority=1.5))

    plugin = Registering(register_with)
    reg = byoc.Registry(only=[])
    with pytest.raises(byoc.PluginError, match=r"BackendSpec\.priority must be an int, got 1\.5"):
        reg.add(plugin)
    assert list(reg.backends) == ["onnxruntime"] and not reg.pm.is_registered(plugin)


def test_the_keyword_form_still_registers_with_a_warning_saying_what_to_write():
    def old_style(register):
        register(
            "old",
            priority=3,
            options={"cache": (str, "", "a cache directory"), "mode": (str, "a", "m", ("a", "b"))},
            local_options={"cache"},
        )

    reg = byoc.Registry(only=[])
    with pytest.warns(DeprecationWarning) as caught:
        reg.add(Registering(old_style), "byoc-old", "1.2")
    messages = [str(w.message) for w in caught]
    assert any(
        "write register(byoc.BackendSpec('old', ...)) with the same keywords (local_options: "
        "byoc.Option(..., local_only=True))" in m
        for m in messages
    ), messages
    assert any("(cache, mode)" in m and "write byoc.Option(" in m for m in messages), messages
    assert {w.filename for w in caught} == {__file__}  # pointing at the plugin's own line
    old = reg.backends["old"]
    assert (old.version, old.distribution, old.priority) == ("1.2", "byoc-old", 3)
    assert old.options["mode"] == byoc.Option(str, "a", "m", ("a", "b"))
    assert old.local_options == {"cache"}
    with pytest.raises(byoc.ConfigError, match=r"'backend\.old\.mode' must be one of a, b"):
        byoc.Config(backend={"old": {"mode": "c"}}).backend_table("old", old.options)


def test_the_keyword_form_names_an_unknown_keyword():
    reg = byoc.Registry(only=[])
    with pytest.warns(DeprecationWarning), pytest.raises(byoc.PluginError, match="priorty"):
        reg.add(Registering(lambda register: register("old", priorty=3)))


class _ThreadNegs(_Negs):
    """_Negs, recording the table each runtime is made with."""

    def __init__(self):
        self.tables = []

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        self.tables.append(dict(config))
        return self.Runtime()


def test_every_backend_has_threads_and_loading_with_threads_sets_it(tmp_path):
    plugin = _ThreadNegs()  # registers no option named threads
    reg = byoc.Registry(only=[])
    reg.add(plugin)
    model = make_model([node("Neg", ["x"], "y")], {"x": [3]}, ["y"])
    config = {"backends": ["negs"], "compile": {"placement": "static"}}
    path = byoc.compile(model, config, registry=reg).save(tmp_path / "m.byoc")
    byoc.load(path, registry=reg, threads=2)
    assert [t["threads"] for t in plugin.tables] == [0, 2]
