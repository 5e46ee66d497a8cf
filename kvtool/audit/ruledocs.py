"""Rule documentation from the registry: ``kvtool rule``, ``docs/rules.md`` and SARIF help.

One source (each rule's class attributes, docstring and references) for every view, so
the docs, SARIF metadata and CLI help never disagree. docs/rules.md also ships in the
wheel (``kvtool/_data/docs/rules.md``) and :func:`markdown` regenerates it.
"""

from __future__ import annotations

from kvtool.audit import rules as _rules  # noqa: F401  (registers every rule)
from kvtool.audit.registry import FAMILIES, REFERENCES_SECTION, Rule, registry

DOCS_HEADER = """\
# kvtool audit rules

Generated from the rule registry by `scripts/gen_rule_docs.py`; do not edit by hand.
`kvtool rule CODE` prints one rule; codes and names are accepted everywhere
(`--select`, `--ignore`, settings, `# kvtool: ignore[...]`).

Severity: **error** = vLLM refuses to start or misbehaves; **warning** = probably wrong;
**info** = advice ("warning or info": the finding says which). Fix: **safe** fixes are
applied by `--fix`; **unsafe** fixes need a human check; **display** fixes are only
described. Since: the kvtool release that introduced the rule.
"""


def rule_text(rule: Rule) -> str:
    """What ``kvtool rule CODE`` prints: identity line, then every docstring section."""
    meta = rule.meta
    lines = [
        f"{meta.code} {meta.name} ({meta.severity_text}; fix: {meta.fix_text}; "
        f"since kvtool {meta.since})",
        "",
        meta.summary,
        "",
    ]
    for title, body in meta.sections.items():
        lines.extend([title, "-" * len(title), body, ""])
    return "\n".join(lines).rstrip() + "\n"


def anchor(code: str, name: str) -> str:
    """The link anchor of a rule's ``### CODE name`` section in ``docs/rules.md``."""
    return f"{code.lower()}-{name}"


def markdown() -> str:
    """``docs/rules.md``: an index table per family, then one section per rule."""
    out = [DOCS_HEADER]
    for family, description in FAMILIES.items():
        members = [rule.meta for rule in registry if rule.meta.family == family]
        if not members:
            continue
        out.append(f"\n## {family}: {description}\n")
        out.append("| Code | Name | Severity | Fix | Since | Summary |")
        out.append("|---|---|---|---|---|---|")
        for meta in members:
            out.append(
                f"| [{meta.code}](#{anchor(meta.code, meta.name)}) | {meta.name} | "
                f"{meta.severity_text} | {meta.fix_text} | {meta.since} | {meta.summary} |"
            )
    out.extend(rule_markdown(rule) for rule in registry)
    return "\n".join(out).rstrip() + "\n"


def rule_markdown(rule: Rule) -> str:
    """One rule's section of ``docs/rules.md`` (also ``kvtool rule CODE --output-format
    markdown``)."""
    meta = rule.meta
    out = [
        f"### {meta.code} {meta.name}\n",
        f"Severity **{meta.severity_text}** · fix **{meta.fix_text}** · "
        f"since kvtool {meta.since} · {meta.summary}\n",
    ]
    for title, body in sections_markdown(rule).items():
        out.append(f"**{title}.** {body}\n" if "\n" not in body else f"**{title}.**\n\n{body}\n")
    return "\n".join(out)


def sections_markdown(rule: Rule) -> dict[str, str]:
    """The docstring sections, with the references as markdown links."""
    meta = rule.meta
    sections = dict(meta.sections)
    sections[REFERENCES_SECTION] = "\n".join(f"- {ref.markdown()}" for ref in meta.references)
    return sections
