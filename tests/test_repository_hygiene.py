"""What a fresh clone needs to read the repository: no path of the machine that wrote a file, and
every reference note a committed file cites is in the repository (issue 11)."""

from __future__ import annotations

import re
import subprocess

from testbed import ROOT


def git_grep(*args: str) -> list[str]:
    proc = subprocess.run(["git", "grep", "-n", "-I", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout.splitlines()


def test_no_machine_paths_in_committed_files() -> None:
    """No checkout, home or temporary directory of a machine: /work/…, /root/…, /home/…, /tmp/…
    (a quoted command in README may name a directory the reader chooses, e.g. /tmp/slurm-state)."""
    allowed = re.compile(r"^README\.md:\d+:envs/(slurm|oar)-local\.sh (start|stop) /tmp/slurm-state")
    pattern = r"(^|[^A-Za-z0-9_.~-])/(work|root|home|tmp)/[A-Za-z0-9_.-]"
    hits = [h for h in git_grep("-E", pattern, "--", ".", ":!tests/test_repository_hygiene.py")
            if not allowed.match(h)]
    # tests that assert a file does NOT contain such a path quote the prefix itself
    hits = [h for h in hits if not re.search(r"""["']/(work|root)/["'] not in""", h)]
    assert hits == [], "\n".join(hits)


def test_cited_reference_notes_exist() -> None:
    """Citations point at docs/references/ (in the repository), never at ../shared/."""
    assert git_grep("-e", "../shared/reference", "--", ".", ":!tests/test_repository_hygiene.py") == []
    cited = {m.group(1) for line in git_grep("-o", "-E", r"docs/references/[A-Za-z0-9_.-]+\.md")
             for m in [re.search(r"(docs/references/[A-Za-z0-9_.-]+\.md)", line)] if m}
    assert cited, "no citation found: the pattern is wrong"
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert missing == [], missing
