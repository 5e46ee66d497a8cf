"""--fix: token edits on argv and shell scripts; every other byte stays as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtool.audit.edits import fix_argv, fix_text
from kvtool.audit.engine import AuditReport, InvocationReport, Target
from kvtool.audit.fix_plan import apply_fixes
from kvtool.audit.inputs import read_argv, read_text
from kvtool.audit.model import Finding, Fix, Invocation, Severity, SourceToken
from kvtool.errors import KvtoolError

SCRIPT = """\
#!/bin/bash
# serve it
exec vllm serve org/m \\
  --tensor-parallel-size 4 \\
  --calculate-kv-scales \\
  --kv-offloading-size 40 --port 8000 \\
  ${EAGER:+--enforce-eager} \\
  --disable-hybrid-kv-cache-manager
echo after
"""


def tokens(invocation: Invocation, *texts: str) -> tuple[SourceToken, ...]:
    return tuple(next(t for t in invocation.tokens if t.text == text) for text in texts)


def drop(invocation: Invocation, *texts: str, replacement: tuple[str, ...] = ()) -> Fix:
    return Fix(
        applicability="safe",
        description=f"drop {' '.join(texts)}",
        remove_tokens=tokens(invocation, *texts),
        replacement=replacement,
    )


def script_invocation() -> Invocation:
    (invocation,) = read_text(SCRIPT, "run.sh")
    return invocation


def test_removing_a_flag_on_its_own_line_removes_the_line() -> None:
    invocation = script_invocation()
    outcome = fix_text(
        SCRIPT, [drop(invocation, "--calculate-kv-scales")], file="run.sh", kind="shell"
    )
    assert outcome.text == SCRIPT.replace("  --calculate-kv-scales \\\n", "")
    assert outcome.applied == 1
    assert "-  --calculate-kv-scales \\" in outcome.diff
    assert outcome.diff.startswith("--- a/run.sh\n+++ b/run.sh\n")


def test_replacing_a_value_in_the_middle_of_a_line() -> None:
    invocation = script_invocation()
    fix = drop(invocation, "40", replacement=("160",))
    outcome = fix_text(SCRIPT, [fix], file="run.sh", kind="shell")
    assert outcome.text == SCRIPT.replace("--kv-offloading-size 40 ", "--kv-offloading-size 160 ")


def test_removing_the_last_line_drops_the_dangling_continuation() -> None:
    invocation = script_invocation()
    fix = drop(invocation, "--disable-hybrid-kv-cache-manager")
    outcome = fix_text(SCRIPT, [fix], file="run.sh", kind="shell")
    expected = SCRIPT.replace(
        "  ${EAGER:+--enforce-eager} \\\n  --disable-hybrid-kv-cache-manager\n",
        "  ${EAGER:+--enforce-eager}\n",
    )
    assert outcome.text == expected
    # The result is still one command followed by "echo after".
    assert [t.text for t in read_text(outcome.text, "run.sh")[0].tokens][-1] == "--enforce-eager"


def test_removing_words_inside_a_line_keeps_the_rest() -> None:
    invocation = script_invocation()
    outcome = fix_text(SCRIPT, [drop(invocation, "--port", "8000")], file="run.sh", kind="shell")
    assert outcome.text == SCRIPT.replace(" --port 8000", "")


def test_conditional_tokens_and_overlaps_are_skipped() -> None:
    invocation = script_invocation()
    fixes = [
        drop(invocation, "--enforce-eager"),
        drop(invocation, "--port", "8000"),
        drop(invocation, "8000"),
    ]
    outcome = fix_text(SCRIPT, fixes, file="run.sh", kind="shell")
    assert outcome.applied == 1 and outcome.applied_fixes == (1,)
    assert len(outcome.skipped) == 2
    assert "${VAR:+...}" in outcome.skipped[0] and "overlaps" in outcome.skipped[1]


def test_a_changed_file_is_not_edited_blindly() -> None:
    invocation = script_invocation()
    changed = SCRIPT.replace("--calculate-kv-scales", "--calculate-kv-scaleZ")
    outcome = fix_text(
        changed, [drop(invocation, "--calculate-kv-scales")], file="run.sh", kind="shell"
    )
    assert outcome.text == changed and outcome.applied == 0 and outcome.diff == ""


@pytest.mark.parametrize("kind", ["vllm-config", "kaito"])
def test_yaml_inside_yaml_and_config_files_are_refused(kind: str) -> None:
    with pytest.raises(KvtoolError, match=r"fixes for .* input are shown, not applied"):
        fix_text("a: 1\n", [], file="x.yaml", kind=kind)  # type: ignore[arg-type]


MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: serve
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: ["vllm", "serve"]
          args:
            - org/m
            - --calculate-kv-scales  # carried over from 0.22
            - --mamba-cache-mode
            - all
            - --port
            - "8000"
        - name: sidecar
          image: vllm/vllm-openai:v0.32.0
          command: ["vllm", "serve", "org/m", "--calculate-kv-scales", "--port", "9000"]
"""


def manifest_fixes(text: str) -> tuple[list[Invocation], list[Fix]]:
    invocations = read_text(text, "deploy.yaml")
    main, sidecar = invocations
    return invocations, [
        drop(main, "--calculate-kv-scales"),
        drop(main, "all", replacement=("align",)),
        drop(sidecar, "--calculate-kv-scales"),
    ]


def test_manifest_items_lose_their_line_and_flow_items_their_comma() -> None:
    invocations, fixes = manifest_fixes(MANIFEST)
    outcome = fix_text(
        MANIFEST, fixes, file="deploy.yaml", kind="kubernetes", invocations=invocations
    )
    assert outcome.applied == 3 and outcome.skipped == ()
    assert outcome.text == (
        MANIFEST.replace("            - --calculate-kv-scales  # carried over from 0.22\n", "")
        .replace("- all\n", "- align\n")
        .replace('"org/m", "--calculate-kv-scales", ', '"org/m", ')
    )
    main, sidecar = read_text(outcome.text, "deploy.yaml")
    assert [t.text for t in main.tokens] == [
        "org/m", "--mamba-cache-mode", "align", "--port", "8000"
    ]  # fmt: skip
    assert [t.text for t in sidecar.tokens] == ["org/m", "--port", "9000"]


def test_a_manifest_that_would_not_read_back_as_intended_is_left_alone() -> None:
    # The fixes were planned on the file as it was read; the sidecar changed since, so
    # the rewrite would not read back as the commands the audit saw.
    invocations, fixes = manifest_fixes(MANIFEST)
    edited = MANIFEST.replace('"--port", "9000"', '"--port", "9001"')
    outcome = fix_text(
        edited, fixes, file="deploy.yaml", kind="kubernetes", invocations=invocations
    )
    assert outcome.text == edited and outcome.applied == 0 and outcome.diff == ""
    assert all("would not read back" in reason for reason in outcome.skipped)


def test_a_sequence_item_takes_one_replacement_word() -> None:
    invocations, _ = manifest_fixes(MANIFEST)
    fix = drop(invocations[0], "all", replacement=("align", "--extra"))
    outcome = fix_text(
        MANIFEST, [fix], file="deploy.yaml", kind="kubernetes", invocations=invocations
    )
    assert outcome.applied == 0 and "one replacement word" in outcome.skipped[0]


def test_shipped_manifest_and_compose_fixes_round_trip(tmp_path: Path) -> None:
    # examples/: a `sh -c` literal block in a LeaderWorkerSet and a folded compose command.
    repo = Path(__file__).resolve().parents[2]
    for name, kind, flag in (
        ("k8s-deployment.yaml", "kubernetes", "--calculate-kv-scales"),
        ("compose.yaml", "compose", "--no-enable-prefix-caching"),
    ):
        text = (repo / "examples" / name).read_text()
        invocations = read_text(text, name)
        owner = next(i for i in invocations if any(t.text == flag for t in i.tokens))
        outcome = fix_text(
            text, [drop(owner, flag)], file=name, kind=kind, invocations=invocations  # type: ignore[arg-type]
        )
        assert outcome.applied == 1, outcome.skipped
        after = read_text(outcome.text, name)
        assert [[t.text for t in i.tokens] for i in after] == [
            [t.text for t in i.tokens if t.text != flag] for i in invocations
        ]


def test_argv_fix() -> None:
    argv = ["vllm", "serve", "m", "--calculate-kv-scales", "--kv-offloading-size", "40"]
    invocation = read_argv(argv)
    outcome = fix_argv(
        argv,
        [drop(invocation, "--calculate-kv-scales"), drop(invocation, "40", replacement=("160",))],
    )
    assert outcome.argv == ("vllm", "serve", "m", "--kv-offloading-size", "160")
    assert outcome.diff.splitlines()[-1] == "+vllm serve m --kv-offloading-size 160"


def test_shipped_example_fix_round_trip(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "examples" / "lmcache-tp4.sh").read_text()
    (invocation,) = read_text(text, "lmcache-tp4.sh")
    outcome = fix_text(
        text, [drop(invocation, "--calculate-kv-scales")], file="lmcache-tp4.sh", kind="shell"
    )
    changed = [line for line in outcome.diff.splitlines() if line.startswith(("+", "-"))]
    assert changed == [
        "--- a/lmcache-tp4.sh",
        "+++ b/lmcache-tp4.sh",
        "-  --calculate-kv-scales \\",
    ]


_FLAGS = ["--port", "-tp", "--kv-offloading-size", "--enforce-eager", "--served-model-name"]
_VALUES = ["8000", "4", "'a b'", '"x y"', "{}", "64"]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_FLAGS), st.sampled_from([None, *_VALUES])), max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_removing_any_options_leaves_the_rest_of_the_script_intact(
    options: list[tuple[str, str | None]], remove: list[bool], same_line: list[bool]
) -> None:
    lines = ["#!/bin/sh", "echo before", "vllm serve org/m"]
    for (flag, value), joined in zip(options, same_line, strict=False):
        words = f"{flag} {value}" if value is not None else flag
        if joined:
            lines[-1] += " " + words
        else:
            lines[-1] += " \\"
            lines.append("  " + words)
    lines.append("echo after")
    text = "\n".join(lines) + "\n"
    (invocation,) = read_text(text, "run.sh")
    args = list(invocation.tokens[1:])
    fixes: list[Fix] = []
    kept: list[str] = []
    for (flag, value), drop_it in zip(options, remove, strict=False):
        taken = args[: 2 if value is not None else 1]
        args = args[len(taken) :]
        if drop_it:
            fixes.append(Fix(applicability="safe", description=flag, remove_tokens=tuple(taken)))
        else:
            kept.extend(t.text for t in taken)
    outcome = fix_text(text, fixes, file="run.sh", kind="shell")
    assert outcome.applied == len(fixes)
    (after,) = read_text(outcome.text, "run.sh")
    assert [t.text for t in after.tokens] == ["org/m", *kept]
    # Only the command changed: what surrounds it is byte-identical.
    assert outcome.text.startswith("#!/bin/sh\necho before\nvllm serve org/m")
    assert outcome.text.endswith("\necho after\n")


_YAML_VALUES = ["8000", "4", "'a b'", '"x y"', "'{\"k\": 1}'", "64", '"$(GIB)"']


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_FLAGS), st.sampled_from([None, *_YAML_VALUES])), max_size=6
    ),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.booleans(),
)
def test_removing_any_manifest_args_reads_back_as_the_rest(
    options: list[tuple[str, str | None]], remove: list[bool], flow: bool
) -> None:
    words = [w for flag, value in options for w in ((flag,) if value is None else (flag, value))]
    items = ["org/m", *words]
    if flow:
        args = "          args: [" + ", ".join(json.dumps(_plain(w)) for w in items) + "]\n"
    else:
        args = "          args:\n" + "".join(f"            - {w}\n" for w in items)
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n"
        "        - name: vllm\n          image: vllm/vllm-openai:v0.32.0\n"
        '          command: ["vllm", "serve"]\n' + args + "        - name: tail\n"
    )
    (invocation,) = read_text(text, "pod.yaml")
    tokens = list(invocation.tokens[1:])
    fixes: list[Fix] = []
    kept: list[str] = []
    for (flag, value), drop_it in zip(options, remove, strict=False):
        taken, tokens = tokens[: 1 if value is None else 2], tokens[1 if value is None else 2 :]
        if drop_it:
            fixes.append(Fix(applicability="safe", description=flag, remove_tokens=tuple(taken)))
        else:
            kept.extend(t.text for t in taken)
    outcome = fix_text(text, fixes, file="pod.yaml", kind="kubernetes", invocations=[invocation])
    assert outcome.applied == len(fixes), outcome.skipped
    (after,) = read_text(outcome.text, "pod.yaml")
    assert [t.text for t in after.tokens] == ["org/m", *kept]
    assert outcome.text.endswith("        - name: tail\n")


def _plain(word: str) -> str:
    """The string a YAML scalar written as ``word`` holds (quotes removed)."""
    from kvtool.yamlio import safe_load

    return str(safe_load(word))


def test_findings_sharing_one_fix_are_all_fixed_and_a_skipped_one_stays(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT)
    (invocation,) = read_text(SCRIPT, str(path))
    port = drop(invocation, "--port", "8000")
    eager = drop(invocation, "--enforce-eager")  # conditional: never applied

    def finding(code: str, fix: Fix) -> Finding:
        location = fix.remove_tokens[0].location
        return Finding(
            code=code,
            name=code,
            severity=Severity.warning,
            message=code,
            fix=fix,
            location=location,
        )

    findings = [finding("AA001", port), finding("BB002", port), finding("CC003", eager)]
    report = AuditReport(
        invocations=[
            InvocationReport(
                label=invocation.label,
                file=invocation.file,
                kind=invocation.kind,
                target=Target("0.32.0", "flag"),
                findings=findings,
            )
        ]
    )
    run = apply_fixes([invocation], report, applicable=("safe",), write=True)
    assert run.applied == 1
    assert {code for code, _, _ in run.fixed_codes} == {"AA001", "BB002"}
    assert "--port" not in path.read_text() and "--enforce-eager" in path.read_text()
