"""The conformance suite every byoc backend plugin runs in its own tests.

In your plugin's ``tests/test_conformance.py``::

    import pytest
    from byoc.testing.conformance import *  # noqa: F403  (the suite's tests and fixtures)

    @pytest.fixture
    def backend_name() -> str:
        return "mybackend"

Override ``backend_config`` (the byoc config, a dict) or ``backend_tolerance`` (rtol, atol) the
same way when your backend needs options or looser comparisons, and ``backend_known_failures``
to list the special-value cases your backend is known to get wrong: the tests holding them
report them as an expected failure (xfail) with your reasons, and fail once one of them passes.
The suite checks that:

- every op type the backend claims, for which ``byoc.testing.ops.OP_CASES`` has a representative
  node, compiles and matches onnxruntime (one test over the claimed ops: nothing is generated,
  or skipped, for ops the backend does not claim; ops without a case are listed in a skip, and
  representative nodes the backend refuses in warnings);
- so do the other settings of those ops it claims (``byoc.testing.ops.OP_VARIANTS``:
  interpolation modes, ties, duplicate indices under a reduction, pads derived from an
  output shape), any of which it may refuse;
- each of those nodes also matches onnxruntime where real models put it: an operand that is a
  constant (an initializer of the partition, not one of ``partition.inputs``), operands that
  broadcast, one value as two inputs (``Add(x, x)``), outputs that other nodes of the
  partition read, a node with several outputs of which one is used (``byoc.testing.ops.
  wirings``);
- every pattern of its pattern table forms its composite on a graph built from the pattern,
  compiles and matches onnxruntime (patterns that cannot be built are reported as warnings);
- those claimed ops and patterns match onnxruntime on special values too (NaN, +inf, -inf,
  -0.0 and subnormals, ``byoc.testing.ops.SPECIAL_VALUES``; NaN equals NaN, and -0.0 equals
  0.0 as in IEEE) — a ``finite_only`` backend's known failures there must vanish under the
  default ``[fallback] nonfinite_inputs``, which runs such inputs on onnxruntime — and their
  int32 and int64 forms on the dtypes' limits, exactly; an integer
  division by zero fails, as in onnxruntime, with a ``byoc.BackendError``;
- a backend that declares ``softmax_masks`` runs attention whose mask holds -inf (padding,
  causal, rows masked entirely) itself and matches onnxruntime, while a mask holding NaN or +inf
  still runs on onnxruntime;
- nodes onnxruntime refuses (inputs of mixed types, an unreleased opset, a wrongly declared
  output type) are not claimed;
- artifacts survive serialize -> deserialize and run the same, and damaged bytes raise
  ``byoc.ArtifactError``;
- an op it does not claim falls back to onnxruntime, values flowing between the two;
- ``run`` gives the same results from many threads at once;
- the backend is listed by ``byoc backends --json`` with the ops it claims.

``byoc.compile`` gives a partition that raises on its measurement inputs back to onnxruntime
(fail safe); in the suite that is a failure, so a crashing kernel cannot pass for a match.

The tests live by what they check: ``kernels`` (ops, variants, wirings, patterns), ``edges``
(special values, masks, integer limits, refused nodes) and ``integration`` (artifacts, the
fallback, threads, ``byoc backends``); ``fixtures`` holds the fixtures, ``checks`` what the
tests share.
"""

from byoc.testing.conformance.edges import (
    test_claimed_ops_on_integer_edges,
    test_claimed_ops_on_special_values,
    test_nodes_onnxruntime_refuses_are_not_claimed,
    test_softmax_masks_may_hold_minus_inf,
)
from byoc.testing.conformance.fixtures import (
    backend_config,
    backend_known_failures,
    backend_tolerance,
    conformance_backend,
)
from byoc.testing.conformance.integration import (
    test_backend_is_listed,
    test_damaged_artifacts_are_refused,
    test_run_is_thread_safe,
    test_serialize_deserialize_runs_the_same,
    test_unclaimed_op_falls_back_to_onnxruntime,
)
from byoc.testing.conformance.kernels import (
    test_claimed_op_variants_match_onnxruntime,
    test_claimed_ops_in_partitions,
    test_claimed_ops_match_onnxruntime,
    test_claimed_ops_without_a_case,
    test_patterns_match_onnxruntime,
)

__all__ = [
    "backend_config",
    "backend_known_failures",
    "backend_tolerance",
    "conformance_backend",
    "test_backend_is_listed",
    "test_claimed_op_variants_match_onnxruntime",
    "test_claimed_ops_in_partitions",
    "test_claimed_ops_match_onnxruntime",
    "test_claimed_ops_on_integer_edges",
    "test_claimed_ops_on_special_values",
    "test_claimed_ops_without_a_case",
    "test_damaged_artifacts_are_refused",
    "test_nodes_onnxruntime_refuses_are_not_claimed",
    "test_patterns_match_onnxruntime",
    "test_run_is_thread_safe",
    "test_serialize_deserialize_runs_the_same",
    "test_softmax_masks_may_hold_minus_inf",
    "test_unclaimed_op_falls_back_to_onnxruntime",
]
