"""The object a finding is about, as kube-linter names it: ``Deployment/vllm container vllm``,
``service vllm``, ``job bench, start server``: what a reader put after the file in the
invocation's label. A shell script's or an argv invocation's label names no object."""

from __future__ import annotations

from kvtool.audit.model import Finding


def object_of(finding: Finding) -> str | None:
    """The object part of the finding's invocation label, or None when there is none."""
    label = finding.invocation
    loc = finding.location
    if not label or loc is None or not loc.file:
        return None
    head = f"{loc.file}: "
    return label[len(head) :] or None if label.startswith(head) else None
