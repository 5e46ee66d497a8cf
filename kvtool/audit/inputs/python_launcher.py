"""Python launchers: the ``vllm serve`` argv a program builds, and the env it sets.

Shapes: Modal apps (``cmd = ["vllm", "serve", "--uvicorn-log-level=info", MODEL_NAME,
..., "--port", str(VLLM_PORT)]``, then ``cmd += ["--tensor-parallel-size", str(N_GPU)]``
and ``subprocess.Popen(" ".join(cmd), shell=True)``, with ``.env({"VLLM_USE_V1": "1"})``
on the image: https://github.com/modal-projects/open-source-av-ragbot
server/services/modal_rag/vllm_server.py); benchmark runners (``[... "vllm", "serve",
model, "--port", str(self.port), *(extra_args or [])]``); launchers writing one string
(``f"vllm serve {model} --tensor-parallel-size {gpus}"``).

Read with Python's own parser, so every word has its exact position. A literal is its
word; a module-level constant (``MODEL_NAME = "..."``) is its value; anything else
(an argument, an attribute, an f-string field, a conditional) is a runtime value,
kept as a ``${...}`` word, never guessed. Words appended to the list by name later in
the same function (``+=``, ``.extend``, ``.append``) are read too. Environment: the
string items of ``os.environ[...] = ``, ``os.environ.update/setdefault``, ``env=``
dicts and Modal's ``.env({...})``, applied to every command of the file (a note says
so). A file Python cannot parse is searched by the generic finder.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from kvtool.audit.inputs import finder, literals
from kvtool.audit.inputs.command_line import ArgvWord, find_serve
from kvtool.audit.inputs.container import container_invocations
from kvtool.audit.inputs.positions import LineIndex, OffsetMap
from kvtool.audit.inputs.shell import ShellContext, read_script
from kvtool.audit.inputs.source import ReadSource
from kvtool.audit.model import EnvAssignment, Invocation, Location
from kvtool.errors import KvtoolError

KIND = "python"
ENV_NOTE = (
    "environment: the variables the Python file sets anywhere (os.environ, env= dicts, "
    ".env({...})) are applied to this command"
)
RUNTIME_NOTE = "values computed when the program runs, not judged: {words}"
_SCRIPT_STARTS = ("vllm serve", "vllm.entrypoints.", "docker run", "podman run")


def read(text: str, source: ReadSource) -> list[Invocation]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return finder.find_in_text(text, source, KIND)
    reader = _Reader(text, source, tree)
    env = tuple(reader.environment(tree))
    context = ShellContext(file=source.file, kind=KIND, base_dir=source.base_dir, env=env)
    found: list[Invocation] = []
    # Written lists used as parts of others (`BASE + [...]`, `[..., *ARGS]`) are read
    # where they are used, not as commands of their own.
    taken: set[int] = _mentions(tree) | reader.fragments(tree)
    commands = _command_strings(tree)
    for scope in _scopes(tree):
        for node in _walk_scope(scope):
            if id(node) in taken:
                continue
            words = reader.argv(node)
            if words is not None:
                if find_serve([w.text for w in words]) is None:
                    continue
                taken.update(id(n) for n in ast.walk(node))
                words += reader.appended(scope, node)
                found.extend(container_invocations(words, text, context, image_entrypoint=None))
            elif (
                isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)) and id(node) not in taken
            ):
                script = reader.string(node) if id(node) in commands else None
                if script is None or not any(s in script for s in _SCRIPT_STARTS):
                    continue
                taken.update(id(n) for n in ast.walk(node))
                found.extend(reader.script(node, script, context))
    for invocation in found:
        runtime = sorted({t.text for t in invocation.tokens if t.text.startswith("${")})
        if runtime:
            note = RUNTIME_NOTE.format(words=", ".join(runtime))
            invocation.notes = (*invocation.notes, note)
        if env:
            invocation.notes = (*invocation.notes, ENV_NOTE)
    return found


# Calls whose string arguments only mention a command (logging it, printing it).
_MENTIONING_CALLS = frozenset(
    {"print", "info", "debug", "warning", "warn", "error", "exception", "critical", "write"}
)


# A string is a command when a call that runs one takes it, or it is bound to a name
# (or keyword) that says it is one; elsewhere (messages, help texts) it mentions one.
_RUNS = re.compile(
    r"(?i)^(?:run|call|check_call|check_output|popen|system|split|spawn\w*|exec\w*"
    r"|create_subprocess_\w+|launch\w*|start\w*|serve\w*|run_\w+|\w+_(?:run|launch|start))$"
)
_COMMAND_NAME = re.compile(r"(?i)cmd|command|script|launch|run|serve|start|entry|exec|argv|args")


def _command_strings(tree: ast.Module) -> set[int]:
    """The string nodes written where a command goes."""
    found: set[int] = set()

    def take(node: ast.AST) -> None:
        strings = (ast.Constant, ast.JoinedStr, ast.BinOp)
        found.update(id(n) for n in ast.walk(node) if isinstance(n, strings))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            name = function.id if isinstance(function, ast.Name) else ""
            if isinstance(function, ast.Attribute):
                name = function.attr
            if _RUNS.search(name):
                for argument in node.args:
                    take(argument)
            for keyword in node.keywords:
                if keyword.arg and _COMMAND_NAME.search(keyword.arg):
                    take(keyword.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [ast.unparse(t) for t in targets]
            containers = (ast.List, ast.Tuple, ast.Set, ast.Dict)
            value = node.value
            if value is None or isinstance(value, containers):
                continue  # a list of words is read as argv, not as scripts
            if any(_COMMAND_NAME.search(n) for n in names):
                take(value)
    return found


def _summands(node: ast.BinOp) -> list[ast.expr]:
    """The operands of a chain of ``+``, left to right."""
    parts: list[ast.expr] = []
    stack: list[ast.expr] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.BinOp) and isinstance(current.op, ast.Add):
            stack += [current.right, current.left]
        else:
            parts.append(current)
    return parts


def _concatenated(node: ast.BinOp) -> list[ast.expr] | None:
    """The parts of ``"vllm serve " + model + " --port 8000"``; None when the sum holds
    no string literal (numbers, lists)."""
    parts = _summands(node)
    strings = [p for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    return parts if strings else None


def _mentions(tree: ast.Module) -> set[int]:
    """Nodes whose strings only mention a command: docstrings and other bare string
    statements, and the arguments of print and logging calls."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            skipped.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.Call):
            function = node.func
            name = function.id if isinstance(function, ast.Name) else None
            if isinstance(function, ast.Attribute):
                name = function.attr
            if name in _MENTIONING_CALLS:
                for argument in node.args:
                    skipped.update(id(n) for n in ast.walk(argument))
    return skipped


def _scopes(tree: ast.Module) -> list[ast.AST]:
    """The module and every function: argv lists grow by name within one of them."""
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    return [tree, *functions]


def _walk_scope(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope``, not those of functions nested in it (their own scope)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        stack[:0] = list(ast.iter_child_nodes(node))


class _Reader:
    def __init__(self, text: str, source: ReadSource, tree: ast.Module) -> None:
        self.text = text
        self.index = LineIndex(text, source.file)
        self.constants: dict[str, str] = {}
        # Names bound once in the file to a list of words (`ARGS = ["--model", M]`).
        bound: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
        self.lists: dict[str, ast.List | ast.Tuple] = {
            name: values[0]
            for name, values in bound.items()
            if len(values) == 1 and isinstance(values[0], (ast.List, ast.Tuple))
        }
        self._expanding: set[str] = set()
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, (str, int, float))
                and not isinstance(statement.value.value, bool)
            ):
                self.constants[statement.targets[0].id] = str(statement.value.value)
            elif (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and ast.unparse(statement.value) == "sys.executable"
            ):
                # `PYTHON_EXEC = sys.executable`, then `[PYTHON_EXEC, "-m", "vllm..."]`
                # (Clarifai's vLLM runner model.py): the interpreter, as sys.executable is.
                self.constants[statement.targets[0].id] = "python"

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.index.offset(node.lineno, node.col_offset + 1)  # type: ignore[attr-defined]
        end_line = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        end_col = node.end_col_offset or node.col_offset  # type: ignore[attr-defined]
        return start, self.index.offset(end_line, end_col + 1)

    def words(self, elements: list[ast.expr]) -> list[ArgvWord]:
        found: list[ArgvWord] = []
        for element in elements:
            if isinstance(element, ast.Starred):
                # `*ARGS` of a list written once in the file; else words only known
                # at run time
                found += self._listed_words(element.value)
                continue
            span = self.span(element)
            found.append(ArgvWord(self.value(element), self.index.location(*span), span))
        return found

    def value(self, node: ast.expr) -> str:
        """A word's text: the literal, a constant's value, else a runtime word."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
            return str(node.value)
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "str"
            and len(node.args) == 1
        ):
            return self.value(node.args[0])
        if isinstance(node, ast.JoinedStr):
            return self.string(node) or literals.runtime_word(ast.unparse(node))
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.executable":
            return "python"
        return literals.runtime_word(ast.unparse(node))

    def argv(self, node: ast.AST) -> list[ArgvWord] | None:
        """The words of a list literal, or of a sum of lists (``["vllm", "serve"] +
        ARGS``, an operand that is no written list counting as runtime words); None for
        anything else."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return self.words(node.elts)
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            return None
        parts = _summands(node)
        if not any(isinstance(p, (ast.List, ast.Tuple)) for p in parts):
            return None
        words: list[ArgvWord] = []
        for part in parts:
            if isinstance(part, (ast.List, ast.Tuple)):
                words += self.words(part.elts)
            else:
                words += self._listed_words(part)
        return words

    def fragments(self, tree: ast.Module) -> set[int]:
        """The nodes of written lists that other lists are built from."""
        used: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Starred) and isinstance(node.value, ast.Name):
                used.add(node.value.id)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                used.update(p.id for p in (node.left, node.right) if isinstance(p, ast.Name))
        return {id(n) for name in used if name in self.lists for n in ast.walk(self.lists[name])}

    def _listed_words(self, node: ast.expr) -> list[ArgvWord]:
        """The words of the list a name is bound to ([] for anything else)."""
        if not isinstance(node, ast.Name) or node.id in self._expanding:
            return []  # not a written list, or one that names itself
        listed = self.lists.get(node.id)
        if listed is None:
            return []
        self._expanding.add(node.id)
        try:
            return self.words(listed.elts)
        finally:
            self._expanding.discard(node.id)

    def string(self, node: ast.Constant | ast.JoinedStr | ast.BinOp) -> str | None:
        if isinstance(node, ast.BinOp):
            summed = _concatenated(node)
            if summed is None:
                return None
            return "".join(
                p.value
                if isinstance(p, ast.Constant) and isinstance(p.value, str)
                else self.value(p)
                for p in summed
            )
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        parts: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                parts.append(part.value)
            elif isinstance(part, ast.FormattedValue):
                parts.append(self.value(part.value))
        return "".join(parts)

    def appended(self, scope: ast.AST, listed: ast.AST) -> list[ArgvWord]:
        """Words added later in ``scope`` to the name the list was assigned to."""
        name = self._assigned_name(scope, listed)
        if name is None:
            return []
        found: list[ArgvWord] = []
        for node in _walk_scope(scope):
            if getattr(node, "lineno", 0) <= getattr(listed, "lineno", 0):
                continue
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
                and isinstance(node.op, ast.Add)
                and isinstance(node.value, (ast.List, ast.Tuple))
            ):
                found += self.words(node.value.elts)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == name
                and len(node.args) == 1
            ):
                argument = node.args[0]
                if node.func.attr == "extend" and isinstance(argument, (ast.List, ast.Tuple)):
                    found += self.words(argument.elts)
                elif node.func.attr == "append":
                    found += self.words([argument])
        return found

    @staticmethod
    def _assigned_name(scope: ast.AST, listed: ast.AST) -> str | None:
        for node in _walk_scope(scope):
            if isinstance(node, ast.Assign) and node.value is listed:
                target = node.targets[0]
                return target.id if isinstance(target, ast.Name) else None
        return None

    def script(
        self, node: ast.Constant | ast.JoinedStr | ast.BinOp, script: str, context: ShellContext
    ) -> list[Invocation]:
        start, end = self.span(node)
        mapping = OffsetMap.align(script, self.text, start, end)

        def locate(begin: int, finish: int) -> Location:
            return self.index.location(mapping.to_source(begin), mapping.to_source(finish))

        try:
            return read_script(script, locate, context)
        except KvtoolError:
            return []

    def environment(self, tree: ast.Module) -> Iterator[EnvAssignment]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and _is_environ(target.value):
                        yield from self._pair(target.slice, node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner, method = node.func.value, node.func.attr
                if method == "setdefault" and _is_environ(owner) and len(node.args) == 2:
                    yield from self._pair(node.args[0], node.args[1])
                elif (method == "update" and _is_environ(owner)) or method == "env":
                    for argument in node.args:
                        yield from self._dict(argument)
                for keyword in node.keywords:
                    if keyword.arg == "env":
                        yield from self._dict(keyword.value)
            elif isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "env":
                        yield from self._dict(keyword.value)

    def _dict(self, node: ast.expr) -> Iterator[EnvAssignment]:
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None:
                    yield from self._pair(key, value)

    def _pair(self, key: ast.expr, value: ast.expr) -> Iterator[EnvAssignment]:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return
        known = self.value(value)
        where = self.index.location(*self.span(key))
        yield EnvAssignment(
            name=key.value, value=None if known.startswith("${") else known, location=where
        )


def _is_environ(node: ast.expr) -> bool:
    return ast.unparse(node) in ("os.environ", "environ", "env")
