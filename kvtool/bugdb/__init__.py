"""The known-bug database of the KV-cache stack (``rules/bugs/``), the trivy-db of kvtool.

* :mod:`kvtool.bugdb.model`: one record (:class:`BugRecord`) and its trigger, impact,
  marker and examples;
* :mod:`kvtool.bugdb.store`: ``records()``, ``record(id)`` and the generator's proofs;
* :mod:`kvtool.bugdb.match`: ``trigger_holds(ctx, trigger)``, the one matcher;
* :mod:`kvtool.bugdb.osv`: the records as OSV (https://ossf.github.io/osv-schema/).
"""

from kvtool.bugdb.match import trigger_holds
from kvtool.bugdb.model import BugRecord, Example, Impact, Marker, Trigger
from kvtool.bugdb.store import Proof, proof_of, proofs, record, records

__all__ = [
    "BugRecord",
    "Example",
    "Impact",
    "Marker",
    "Proof",
    "Trigger",
    "proof_of",
    "proofs",
    "record",
    "records",
    "trigger_holds",
]
