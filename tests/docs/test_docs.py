"""Keeps README.md and docs/ true to the code: every snippet runnable or at least resolvable,
every command accepted by the CLI's parser, every link and named path existing.

Checked, for README.md and every docs/**/*.md outside docs/evidence/ (which records past runs
and is exempt):

- fenced ``python`` blocks compile; their imports from ``executorch_tensorrt`` and
  ``executorch`` and the attributes they read from those modules resolve in the installed
  package. A block after ``<!-- run -->`` is run whole in a temporary folder (CPU fallback
  allowed); a block after ``<!-- needs-gpu -->`` is only compiled.
- ``executorch-tensorrt ...`` commands in shell blocks parse with the CLI's own argparse
  parser; in prose code spans, their subcommand and ``--flags`` exist.
- ``executorch_tensorrt.name`` code spans in prose resolve in the package.
- relative links reach an existing file (and heading, for ``file.md#anchor``); repository
  paths in code spans (``src/...``, ``tools/...``, ``tests/...``, ``examples/...``,
  ``native/...``, ``docs/...``) exist.
- no dated headings, issue numbers or dates outside docs/evidence/; README.md at most 200 lines.

The checkers return lists of problems; the ``test_planted_*`` tests feed each one a broken
document and require it to report the break.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import glob
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
PATH_ROOTS = ("src", "tools", "tests", "examples", "native", "docs")
CLI_NAMES = {"executorch-tensorrt"}
CLI_MODULES = {"executorch_tensorrt", "executorch_tensorrt.cli", "executorch_tensorrt.cli.main"}
CHECKED_ROOTS = ("executorch_tensorrt", "executorch")
SHELL_LANGS = {"", "sh", "bash", "shell", "console", "text"}


def doc_files() -> list[Path]:
    docs = sorted(p for p in (REPO / "docs").rglob("*.md")
                  if "evidence" not in p.relative_to(REPO / "docs").parts)
    return [REPO / "README.md", *docs]


def _ids(paths):
    return [p.relative_to(REPO).as_posix() for p in paths]


# parsing ----------------------------------------------------------------------------


@dataclass
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    marks: set[str] = field(default_factory=set)


@dataclass
class Doc:
    path: Path
    blocks: list[Block]
    prose: str  # the text with fenced blocks blanked (line numbers kept)

    @property
    def name(self) -> str:
        try:
            return self.path.relative_to(REPO).as_posix()
        except ValueError:
            return self.path.name


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
_MARK = re.compile(r"^\s*<!--\s*(run|needs-gpu)\s*-->\s*$")


def parse(path: Path, text: str | None = None) -> Doc:
    lines = (path.read_text() if text is None else text).split("\n")
    blocks, prose = [], []
    fence, current = None, None
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            marks = set()
            j = i - 1
            while j >= 0 and _MARK.match(lines[j]):
                marks.add(_MARK.match(lines[j]).group(1))
                j -= 1
            current = Block(m.group(2).lower(), "", i + 1, marks)
            body: list[str] = []
            prose.append("")
        elif fence is not None and m and line.strip().startswith(fence) and not m.group(2):
            current.text = "\n".join(body) + "\n"
            blocks.append(current)
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, f"{path}: unclosed code fence"
    return Doc(path, blocks, "\n".join(prose))


def code_spans(prose: str) -> list[tuple[int, str]]:
    """(line, text) of every inline code span, whitespace runs made single spaces."""
    out = []
    for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", prose, re.S):
        out.append((prose.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())))
    return out


# the CLI ----------------------------------------------------------------------------


@functools.cache
def cli_parser() -> argparse.ArgumentParser:
    """The only coupling to the CLI's layout: its public parser factory."""
    from executorch_tensorrt.cli.parser import build_parser

    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def cli_invocations(command: str) -> list[list[str]]:
    """The argument lists of every executorch-tensorrt call in one shell command line."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    calls, argv = [], []
    for tok in tokens + [";"]:
        if tok and set(tok) <= set(";&|"):
            calls.append(argv)
            argv = []
        else:
            argv.append(tok)
    out = []
    for argv in calls:
        while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            argv = argv[1:]
        if not argv:
            continue
        if Path(argv[0]).name in CLI_NAMES:
            out.append(argv[1:])
        elif re.match(r"(.*/)?python[\d.]*$", argv[0]) and argv[1:2] == ["-m"] \
                and len(argv) > 2 and argv[2] in CLI_MODULES:
            out.append(argv[3:])
    return out


def check_cli_args(args: list[str]) -> str | None:
    """None when the parser accepts args (as a full command line), else its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli_parser().parse_args(args)
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1] if err.getvalue() else f"exit {e.code}"
    return None


def check_cli_span(args: list[str]) -> str | None:
    """For a command quoted in prose: the subcommand and each --flag exist."""
    parser = cli_parser()
    subs = _subparsers(parser)
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    positional = [a for a in args if not a.startswith("-")]
    if positional and positional[0] in subs:
        known = _options(subs[positional[0]]) | _options(parser)
    elif positional and not positional[0].isupper():
        return f"unknown subcommand {positional[0]!r}"
    else:
        known = _options(parser)
    bad = [f for f in flags if f not in known]
    return f"unknown option(s) {', '.join(bad)}" if bad else None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out, buf, start = [], "", None
    for i, line in enumerate(text.split("\n")):
        if start is None:
            start = i
        line = re.sub(r"^\s*[$#>] (?=\S)", "", line) if line.lstrip().startswith("$ ") else line
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf, start = "", None
    return out


def check_shell_block(block: Block) -> list[str]:
    problems = []
    for offset, line in _logical_lines(block.text):
        for args in cli_invocations(line):
            msg = check_cli_args(args)
            if msg:
                problems.append(f"line {block.line + 1 + offset}: `{line.strip()}`: {msg}")
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for tok in tokens:
            tok = tok.split("=", 1)[-1]
            if tok.split("/", 1)[0] in PATH_ROOTS and "/" in tok:
                msg = check_repo_path(tok)
                if msg:
                    problems.append(f"line {block.line + 1 + offset}: {msg}")
    return problems


# Python -----------------------------------------------------------------------------


def _is_checked(module: str) -> bool:
    return module.split(".")[0] in CHECKED_ROOTS


def resolve(dotted: str) -> str | None:
    """None when a dotted name resolves (importing modules as needed), else why not."""
    parts = dotted.split(".")
    obj, i = None, 0
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError:
            continue
    else:
        return f"no module {parts[0]!r}"
    for j, part in enumerate(parts[i:], start=i):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[: j + 1]))
            except ModuleNotFoundError:
                return f"{'.'.join(parts[:j])} has no {part!r}"
    return None


def python_names(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) for everything a snippet takes from the checked packages."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_checked(a.name):
                    names.append((node.lineno, a.name))
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and _is_checked(node.module):
            for a in node.names:
                if a.name != "*":
                    names.append((node.lineno, f"{node.module}.{a.name}"))
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, cur = [], node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                names.append((node.lineno, ".".join([aliases[cur.id], *reversed(chain)])))
    return names


def check_python_block(block: Block) -> list[str]:
    try:
        compile(block.text, f"<block at line {block.line}>", "exec")
    except SyntaxError as e:
        return [f"line {block.line + (e.lineno or 0)}: does not compile: {e.msg}"]
    if "needs-gpu" in block.marks:
        return []
    problems = []
    for line, dotted in python_names(block.text):
        msg = resolve(dotted)
        if msg:
            problems.append(f"line {block.line + line}: {dotted}: {msg}")
    return problems


def run_python_block(block: Block, cwd: Path) -> str | None:
    script = cwd / f"block_{block.line}.py"
    script.write_text(block.text)
    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    proc = subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode:
        return f"line {block.line}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    return None


def check_prose_names(doc: Doc) -> list[str]:
    problems = []
    for line, span in code_spans(doc.prose):
        m = re.fullmatch(r"(executorch_tensorrt(?:\.[A-Za-z_]\w*)+)(\(.*\))?", span)
        if m:
            msg = resolve(m.group(1))
            if msg:
                problems.append(f"line {line}: `{span}`: {msg}")
        if span.startswith("executorch-tensorrt "):
            try:
                args = shlex.split(span)[1:]
            except ValueError:
                continue
            msg = check_cli_span(args)
            if msg:
                problems.append(f"line {line}: `{span}`: {msg}")
    return problems


# links and paths --------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    doc = parse(path)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", doc.prose, re.M)}


def check_repo_path(token: str) -> str | None:
    token = re.split(r"::|:\d|[,;)]", token)[0].rstrip(".:")
    if not token or token.endswith("/...") or re.search(r"[{<\[]", token):
        return None
    hits = glob.glob(str(REPO / token)) if "*" in token else [str(REPO / token)] \
        if (REPO / token).exists() else []
    return None if hits else f"`{token}` does not exist"


def check_links(doc: Doc) -> list[str]:
    problems = []
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), doc.prose)
    for m in re.finditer(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        target = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.path.parent / file_part).resolve() if file_part else doc.path
        if not dest.exists():
            problems.append(f"line {line}: link to missing {target}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"line {line}: link to missing heading #{anchor} in {file_part or 'this file'}")
    for line, span in code_spans(doc.prose):
        first = span.split(" ")[0]
        if first.split("/", 1)[0] in PATH_ROOTS and "/" in first:
            msg = check_repo_path(first)
            if msg:
                problems.append(f"line {line}: {msg}")
    return problems


_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_ISSUE = re.compile(r"\bissues? #?\d+|(?<![\w&])#\d{1,4}\b(?!-)", re.I)


def check_manual_style(doc: Doc) -> list[str]:
    problems = []
    for i, line in enumerate(doc.prose.split("\n"), start=1):
        if _DATE.search(line):
            problems.append(f"line {i}: a date outside docs/evidence/: {line.strip()[:80]}")
        if _ISSUE.search(line):
            problems.append(f"line {i}: an issue number outside docs/evidence/: {line.strip()[:80]}")
    if doc.path == REPO / "README.md":
        n = len(doc.prose.splitlines())
        if n > README_MAX_LINES:
            problems.append(f"README.md has {n} lines (at most {README_MAX_LINES})")
    return problems


def check_doc(doc: Doc) -> list[str]:
    problems = []
    for block in doc.blocks:
        if block.lang in ("python", "py"):
            problems += check_python_block(block)
        elif block.lang in SHELL_LANGS:
            problems += check_shell_block(block)
    problems += check_prose_names(doc) + check_links(doc) + check_manual_style(doc)
    return [f"{doc.name}: {p}" for p in problems]


# the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("path", doc_files(), ids=_ids(doc_files()))
def test_doc(path):
    problems = check_doc(parse(path))
    assert not problems, "\n".join(problems)


def _runnable():
    return [(p, b) for p in doc_files() for b in parse(p).blocks if "run" in b.marks]


@pytest.mark.parametrize("path,block", _runnable(),
                         ids=[f"{p.relative_to(REPO).as_posix()}:{b.line}" for p, b in _runnable()])
def test_runnable_block(path, block, tmp_path):
    assert block.lang in ("python", "py"), f"{path}:{block.line}: only python blocks run"
    msg = run_python_block(block, tmp_path)
    assert msg is None, f"{path.relative_to(REPO)}: {msg}"


def test_every_python_block_is_checked():
    """The parser finds the README's blocks (guards against a parser that finds nothing)."""
    doc = parse(REPO / "README.md")
    assert sum(b.lang == "python" for b in doc.blocks) >= 3
    assert any("run" in b.marks for b in doc.blocks)
    assert any(cli_invocations(line) for b in doc.blocks for _, line in _logical_lines(b.text))


# each checker must fail on a planted break ------------------------------------------

PLANTED = """# Planted

See [the missing page](no-such-page.md) and [a heading](other.md#no-such-heading).
The code is in `src/executorch_tensorrt/no_such_module.py`; call
`executorch_tensorrt.no_such_function()` or `executorch-tensorrt export --no-such-flag`.

## Measured (2026-01-01)

```python
from executorch_tensorrt import no_such_name
import executorch_tensorrt
executorch_tensorrt.export_nothing(1)
```

<!-- needs-gpu -->
```python
def broken(:
```

```bash
executorch-tensorrt export model.pt2 model.pte --no-such-flag
executorch-tensorrt no-such-command
bash tools/no_such_script.sh
```
"""


def test_planted_breaks_are_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n")
    path = tmp_path / "planted.md"
    path.write_text(PLANTED)
    problems = "\n".join(check_doc(parse(path)))
    for expected in ("missing no-such-page.md", "missing heading #no-such-heading",
                     "no_such_module.py` does not exist", "executorch_tensorrt.no_such_function",
                     "unknown option(s) --no-such-flag", "a date outside",
                     "executorch_tensorrt.no_such_name", "export_nothing", "does not compile",
                     "unrecognized arguments: --no-such-flag", "invalid choice: 'no-such-command'",
                     "tools/no_such_script.sh` does not exist"):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"


def test_planted_failing_block_is_reported(tmp_path):
    block = Block("python", "import executorch_tensorrt\nraise SystemExit(3)\n", 1, {"run"})
    assert "exit 3" in run_python_block(block, tmp_path)


def test_a_clean_document_passes(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n")
    path = tmp_path / "clean.md"
    path.write_text("# Clean\n\n[other](other.md#a-heading) `tools/setup.sh`\n\n"
                    "```python\nimport executorch_tensorrt\nexecutorch_tensorrt.export\n```\n\n"
                    "```bash\nexecutorch-tensorrt inspect model.pte --report\n```\n")
    assert check_doc(parse(path)) == []
