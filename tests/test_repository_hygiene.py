"""What a fresh clone needs to read the repository: no path of the machine that wrote a file, and
every reference note a committed file cites is in the repository; no work diary in the project's files."""

from __future__ import annotations

import ast
import re
import subprocess

from support.hygiene import MACHINE_DIRS, MACHINE_PATH

from testbed import ROOT


def git_grep(*args: str) -> list[str]:
    proc = subprocess.run(["git", "grep", "-n", "-I", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout.splitlines()


def test_no_machine_paths_in_committed_files() -> None:
    """No checkout, home or temporary directory of a machine in a committed file (a quoted command
    in README may name a scratch directory the reader chooses: envs/slurm-local.sh start DIR)."""
    allowed = re.compile(r"^README\.md:\d+:envs/(slurm|oar)-local\.sh (start|stop) /" + MACHINE_DIRS[3] + "/slurm-state")
    hits = [h for h in git_grep("-E", MACHINE_PATH) if not allowed.match(h)]
    assert hits == [], "\n".join(hits)


def test_cited_reference_notes_exist() -> None:
    """Citations point at docs/references/ (in the repository), never at ../shared/."""
    assert git_grep("-e", "../shared/reference", "--", ".", ":!tests/test_repository_hygiene.py") == []
    cited = {m.group(1) for line in git_grep("-o", "-E", r"docs/references/[A-Za-z0-9_.-]+\.md")
             for m in [re.search(r"(docs/references/[A-Za-z0-9_.-]+\.md)", line)] if m}
    assert cited, "no citation found: the pattern is wrong"
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert missing == [], missing


#: where the project's history may be told: the change log (with the measurements as they were
#: made, "Benchmark history"); bench/RESULTS.md is a reference of the figures in force
HISTORY_FILES = ("CHANGELOG.md", "LICENSE")
#: "session" in the senses a reader meets outside this project's history (a batch scheduler's or a
#: shell's session, pytest's session-scoped fixtures) may stay
OTHER_SESSIONS = re.compile(r"(OAR|SLURM|MPI|ssh|SSH|login|interactive|tmux|screen|user|X11) sessions?\b"
                            r"|scope=.session.|session-scoped")


def test_no_work_diary_outside_the_history() -> None:
    """README, docs, code and tests name behaviours, not the tracker's issue numbers or the work
    sessions that produced them (an issue tracker is not in the repository); the history lives in
    CHANGELOG.md (bench/RESULTS.md, README and docs included in the check)."""
    pattern = r"\bsessions?\b|\bissues? #?[0-9]"
    excluded = [*HISTORY_FILES, "tests/test_repository_hygiene.py"]  # this file names the words
    hits = git_grep("-i", "-E", pattern, "--", ".", *[f":!{f}" for f in excluded])
    hits = [h for h in hits if not OTHER_SESSIONS.search(h)]
    assert hits == [], "\n".join(hits)


#: README.md is the entry point: past this, its detail belongs in docs/ or a folder's README
README_MAX_LINES = 250


def test_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_results_open_with_the_current_results() -> None:
    """bench/RESULTS.md is a reference: its title, then "Current results" (the table of the figures in
    force), then one section per figure; no "History" section (that is CHANGELOG.md's)."""
    text = (ROOT / "bench" / "RESULTS.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# ") and headings[1] == "## Current results", headings[:2]
    assert text.splitlines()[2] == "## Current results", "text between the title and Current results"
    assert "## History" not in headings
    table = [line for line in text.split("## Current results", 1)[1].split("\n## ", 1)[0].splitlines()
             if line.startswith("|")]
    assert table[0].startswith("| figure | value | target | command") and len(table) > 3


def test_no_test_module_imports_another() -> None:
    """Shared fixtures live in tests/conftest.py and shared helpers in tests/support/: a test module
    importing another runs that module's import-time code twice and ties the two together."""
    modules = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[-1] in modules or n.startswith("tests.")]
    assert found == [], "\n".join(found)
