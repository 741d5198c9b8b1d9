"""Placement: which partitions a compile keeps. Placement only decides: ``byoc.compiler.
compile`` asks ``Placer.decide`` for the plan, builds it (reusing what deciding made), and
asks ``Placer.verify`` whether the built model stays. Placement never partitions: where the
plan must change it answers ``Repartition`` with the vetoes, and the compiler, which owns the
only loop that partitions again, hands it the next plan. For the plan it is given, ``decide``:

1. runs the plan once on representative inputs (given, or ``random_inputs``: valid by
   construction where the graph says what an input is), every unit on onnxruntime, so each
   backend partition gets its real input values and outputs;
2. builds each backend partition and runs it once on them: one that fails, or (measured) whose
   outputs differ from onnxruntime's beyond ``[compare]`` rtol/atol plus twice what
   onnxruntime's own runs differ by (optimized against unoptimized, and a float16 model
   against float32), goes back untimed; one that quantizes with its backend's own arithmetic
   (``[backend.<name>] int8 = "own"``) may instead stay within ``[compile]
   precision_tolerance``, in either placement, and if it fails only its quantizers go back;
3. (``[compile] placement = "measured"``, the default) times each remaining partition against
   an onnxruntime session of the same partition model, interleaved after a warm-up, medians,
   with the fallback's thread settings and spinning off (how a multi-unit plan runs); a
   timing while other processes took more than ``host.BUSY`` of the CPUs is taken again
   after a pause, and if still disturbed, again with both sides on one thread in CPU time
   (``Ledger.undisturbed``); where that cannot be built it is no evidence: the partition
   goes back, uncached;
4. vetoes, for that backend, the nodes of every partition that fails or does not win by
   ``[compile] margin`` and partitions again (another backend may claim them; the leftover
   graph is re-cut into as few onnxruntime sessions as acyclicity allows), until every
   partition is kept;
4b. (measured, several backends, ``[compile] search``) searches: each backend partitions the
   whole graph alone (its own pieces' timing losses do not veto it there), its winning
   partitions join the plan's as candidates, the candidates
   that save the most are taken greedily without overlap, and if they beat the plan by the
   margin the other candidates' nodes are vetoed for their backends and step 4 runs again;
5. (``verify``) runs the built model once and times it against plain onnxruntime on the whole
   model; if it fails, or its outputs differ from plain onnxruntime's as a partition's may
   not (step 2; small differences that later layers magnify), or it still loses, or its
   partitions cannot explain its win (together they save less than the margin of plain
   onnxruntime's time), or other processes disturbed the check (and it could not be taken on
   one thread), warns in one line and
   (``[compile] whole_model_fallback``) gives the plan that runs the model as one onnxruntime
   session; a failure or a difference always does.

When nothing can be run (no inputs, onnxruntime fails on them, or it cannot load a segment
byoc made: a bug to report), measured placement sends every partition to onnxruntime, with one
line saying why. Every verdict lands in ``Plan.placement`` and, for returned nodes, in their
refusals, so ``byoc explain`` and ``byoc partition`` show it. Timings are cached in the user
cache dir, keyed by the partition's content, backend, version and native build, the backend's
and the fallback's settings, and the host (``byoc.host``): a second compile of the same model
times nothing but still runs each partition once to check it. The cache is data byoc may not
have written: an entry that is not a small regular file, or that ``read_entry`` refuses (a
field of the wrong type or range, nodes other than those it is read for), is a miss, with one
line. Step 4's rounds are bounded, and where they cannot settle (a round vetoes nothing new:
a bug) every partition goes to onnxruntime, with one line.

Placement is in layers, each module one job, each reading the layers below it and returning
values (verdicts, vetoes), never changing a measurement, a partition or a veto it is given;
this module is the facade that names what the rest of byoc uses:

- ``cache``: the measurement cache on disk and its schema (``read_entry``, ``MeasurementCache``);
- ``timing``: timing statistics (``time_pair``, ``time_blocks``) and disturbed timings;
- ``rules``: the rules, pure functions of measurements (``wins``, ``gains``, ...);
- ``ledger``: one compile's shared facts (keys, cached verdicts, reference runs, memory);
- ``check``: the per-partition check (steps 2 and 3: tolerance, precision, own int8, exact
  retry);
- ``search``: the search (step 4b); ``whole``: the whole-model check (step 5);
- ``placer``: the steps in order (``Placer``).
"""

# Tests redirect the cache with ``monkeypatch.setattr(byoc.placement.cache, "cache_root", ...)``
# and patch the timers in ``byoc.placement.timing``: the names here are copies of those.
from byoc.placement.cache import _KEY as _KEY  # the fuzzer's (core/tests/fuzz)
from byoc.placement.cache import (
    CACHE_VERSION,
    MAX_ENTRY_BYTES,
    BadEntry,
    MeasurementCache,
    SearchEntry,
    cache_root,
    host_id,
    read_entry,
)
from byoc.placement.ledger import Vetoes
from byoc.placement.placer import Placer, Repartition, Verified
from byoc.placement.search import SEARCH_RULES
from byoc.placement.timing import Timing

__all__ = [
    "CACHE_VERSION",
    "MAX_ENTRY_BYTES",
    "SEARCH_RULES",
    "BadEntry",
    "MeasurementCache",
    "Placer",
    "Repartition",
    "SearchEntry",
    "Timing",
    "Verified",
    "Vetoes",
    "cache_root",
    "host_id",
    "read_entry",
]
