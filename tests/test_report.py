"""The report: self-contained HTML, Markdown twin, platform summary, reference comparison."""

from __future__ import annotations

import re
from pathlib import Path

from testbed.cli import main
from testbed.report.report import normalize_term, platform_summary


def test_report_is_self_contained_and_complete(experiment_dir: Path, tmp_path: Path):
    reference = tmp_path / "reference.csv"
    reference.write_text("term,estimate,ci_low,ci_high\nA,4.2,3.9,4.5\nAB,2.5,2.1,2.9\nB*C,0.4,0.1,0.7\n")
    out = tmp_path / "report"
    assert main(["report", "--experiment", f"syn={experiment_dir}", "--out", str(out), "--title", "T",
                 "--reference", str(reference), "--platforms-dir", str(tmp_path / "none")]) == 0
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    # every image is embedded; nothing refers to a file
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == 8 and all(s.startswith("data:image/png;base64,") for s in srcs)
    # every figure has a caption saying what it shows, the residual diagnostics included
    captions = re.findall(r"<img alt=\"([^\"]+)\"[^>]*/><figcaption>([^<]+)</figcaption>", html)
    assert len(captions) == 8 and all(len(c) > 60 for _, c in captions)
    by_name = dict(captions)
    assert "QQ plot" in by_name["residuals_qq"] and "fitted" in by_name["residuals_fitted"]
    assert "half-normal" in by_name["halfnormal_effects"] and "levels of A, B" in by_name["boxplot_AB"]
    assert [name for name, _ in captions][0] == "main_effects"
    assert "<link" not in html
    # each section under its heading, with an anchor the experiment's table of contents links to
    contents = re.search(r'<nav class="toc" aria-label="Contents of experiment syn">(.*?)</nav>', html, re.S)
    assert contents is not None and '<h2>Experiment syn</h2>' in html
    for title in ("syn: platform", "syn: design", "syn: analysis of variance", "syn: best configuration",
                  "syn: comparison with the reference", "syn: figures", "Engine and versions"):
        heading = re.search(rf'<section id="([a-z0-9-]+)">\s*<h([23])>{re.escape(title)}</h\2>', html)
        assert f"## {title}" in md and heading is not None, title
        if title.startswith("syn: "):
            assert f'href="#{heading[1]}"' in contents[1] and heading[2] == "3", title
    # tables are HTML tables, not Markdown text
    assert html.count("<table") == 3 and "|---|" not in html and "| A:B |" not in html
    assert "14 × `chetemi`" in md and "7 × `chifflet`" in md  # from platforms/clusters/g5k-lille-21.yaml
    assert "full factorial 2^4 = 16 configurations × 3 repetitions = 48 runs" in md
    assert "SimGrid" in md and "testbed commit" in md and "statsmodels" in md
    # side by side: simulated A:B and the reference's "AB" are the same term
    row = next(line for line in md.splitlines() if line.startswith("| A:B |") and "yes" in line)
    assert "2.5" in row and "[2.1, 2.9]" in row
    assert "| B:C |" in md  # a reference term that is not prominent in the simulation is still shown
    assert "![main_effects](" in md


def test_platform_summary_prefers_the_generated_platform(tmp_path: Path):
    xml = tmp_path / "mini" / "numasim.xml"
    xml.parent.mkdir()
    hosts = "".join(f'<host id="n1.cpu{i}" speed="1f"><prop id="kind" value="cpu"/></host>' for i in range(4))
    xml.write_text(f'<?xml version="1.0"?><platform version="4.1"><zone id="mini" routing="Full">'
                   f'<zone id="n1" routing="Floyd"><prop id="machine" value="m"/>{hosts}'
                   f'<host id="n1.gpu0" speed="1f"><prop id="kind" value="gpu"/></host></zone></zone></platform>')
    text = platform_summary("mini", tmp_path)
    assert "1 × `m` (4 cpu, 1 gpu per node)" in text
    assert "no description found" in platform_summary("nowhere", tmp_path)


def test_bad_reference_is_an_input_error(experiment_dir: Path, tmp_path: Path, capsys):
    bad = tmp_path / "ref.csv"
    bad.write_text("term,estimate\nA,big\n")
    out = tmp_path / "report"
    assert main(["report", "--experiment", f"syn={experiment_dir}", "--out", str(out), "--reference", str(bad)]) == 2
    assert "row 1, column estimate" in capsys.readouterr().err
    assert not out.exists()


def test_term_names_are_normalized():
    assert normalize_term("A:B") == normalize_term("BA") == normalize_term("A*B") == normalize_term("a x b") == "A:B"


def test_a_ledger_becomes_its_own_section(experiment_dir: Path, tmp_path: Path):
    """`testbed explain`'s output in the experiment's ledger/ folder: one table per term, as HTML."""
    import shutil

    exp = tmp_path / "syn"
    shutil.copytree(experiment_dir, exp)
    (exp / "ledger").mkdir()
    rows = ["term,row,mechanism,estimate_s,ci95_low_s,ci95_high_s,share_of_effect,effect_without_s,seeds",
            "A,effect,,1.5,1.4,1.6,1,nan,3", "A,contribution,pinned_alloc,1.2,1.1,1.3,0.8,0.3,3",
            "A,base,,0.1,0.1,0.1,0.0667,nan,3", "A,interactions,,0.2,0.1,0.3,0.133,nan,3"]
    (exp / "ledger" / "ledger.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "report"
    assert main(["report", "--experiment", f"syn={exp}", "--out", str(out), "--platforms-dir",
                 str(tmp_path / "none")]) == 0
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert "## syn: mechanism ledger of the largest terms" in md
    assert "| pinned_alloc | +1.2000 | [+1.1000, +1.3000] | +80.0 % |" in md
    assert html.count("<table") == 3 and "<td>pinned_alloc</td>" in html  # design, ANOVA, ledger
