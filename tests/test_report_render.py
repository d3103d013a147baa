"""The HTML report as a user sees it: rendered by headless Chromium (Debian package chromium,
installed by envs/setup.sh), the screenshot checked for the figures it must show.

The report is built from the synthetic campaign of test_report.py plus a traced pair of real numasim
runs (test_traces.run_tiny), so it holds the analysis figures, the residual diagnostics and the trace
section (space-time chart, utilisation, `testbed compare-traces`' Markdown tables). No Markdown may
show through as text: tables are drawn as tables, headings as headings."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.traces import run_tiny

from testbed.cli import main
from testbed.common import paths
from testbed.report.report import page, trace_section
from testbed.traces.compare_traces import write_comparison
from testbed.traces.traces import read_tasks, read_transfers
from testbed.traces.utilisation import utilisation

BROWSER = shutil.which("chromium")
WIDTH = 1200
#: first window height tried (px); doubled while the page reaches the window's bottom
WINDOW_HEIGHT = 16384
MAX_WINDOW_HEIGHT = 65536
pytestmark = [
    pytest.mark.skipif(BROWSER is None, reason="chromium not installed (Debian package chromium, "
                                               "listed in envs/setup.sh)"),
    pytest.mark.skipif(not paths.NUMASIM.exists(), reason="numasim not built (make build)"),
]


class Figures(HTMLParser):
    """Each <figure>'s image source and caption text, and images outside a figure."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict] = []
        self.loose_images = 0
        self._in_figure = self._in_caption = False

    def handle_starttag(self, tag, attrs):
        if tag == "figure":
            self._in_figure = True
            self.figures.append({"src": None, "alt": "", "caption": ""})
        elif tag == "img":
            if not self._in_figure:
                self.loose_images += 1
            else:
                self.figures[-1].update(src=dict(attrs).get("src"), alt=dict(attrs).get("alt", ""))
        elif tag == "figcaption":
            self._in_caption = True

    def handle_endtag(self, tag):
        if tag == "figure":
            self._in_figure = False
        elif tag == "figcaption":
            self._in_caption = False

    def handle_data(self, data):
        if self._in_caption:
            self.figures[-1]["caption"] += data


class VisibleText(HTMLParser):
    """The page's text as a reader sees it: every text node outside <head> (style, title)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag, attrs):
        self._hidden += tag in ("head", "style", "script")

    def handle_endtag(self, tag):
        self._hidden -= tag in ("head", "style", "script")

    def handle_data(self, data):
        if not self._hidden:
            self.chunks.append(data)


#: what Markdown looks like when it is shown instead of rendered: a table's rule line or row, a
#: heading, an image reference
RAW_MARKDOWN = re.compile(r"\|\s*:?-{3,}:?\s*\||^\s*\|.*\|\s*$|^\s*#{1,6}\s|!\[[^\]]*\]\(", re.M)


def raw_markdown(html: str) -> list[str]:
    """The visible lines of a page that are Markdown syntax rather than rendered text."""
    parser = VisibleText()
    parser.feed(html)
    return [m.group(0) for chunk in parser.chunks for m in RAW_MARKDOWN.finditer(chunk)]


def table_rules(image: np.ndarray) -> int:
    """Rows of the screenshot drawn as a table's rule: a run of at least 60 px of the cells'
    bottom border (#ddd, the report's CSS) on one pixel row."""
    rule = (np.abs(image - 0xdd / 255) < 0.02).all(axis=2)
    count = 0
    for row in rule:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(int), [0]))))
        if len(edges) and (edges[1::2] - edges[::2]).max() >= 60:
            count += 1
    return count


def screenshot(html: Path, out: Path) -> np.ndarray:
    """The whole page at WIDTH px: Chromium's --screenshot captures the window, so the window is
    made taller than the page (doubled until white rows remain below the content) and the white
    rows below the page's last drawn row are cut off."""
    height = WINDOW_HEIGHT
    while True:
        # --no-sandbox: as root (CI), Chromium's sandbox refuses to start; one pixel per CSS pixel
        proc = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--force-device-scale-factor=1", f"--window-size={WIDTH},{height}",
                               f"--screenshot={out}", html.resolve().as_uri()],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and out.is_file(), proc.stderr
        image = np.asarray(Image.open(out).convert("RGB"), dtype=float) / 255
        drawn = np.flatnonzero((image < 0.99).any(axis=(1, 2)))
        last = int(drawn[-1]) + 1 if len(drawn) else 0
        if last < image.shape[0] - 16 or height >= MAX_WINDOW_HEIGHT:
            assert last < image.shape[0] - 16, f"the page is taller than {MAX_WINDOW_HEIGHT} px"
            return image[:last]
        height *= 2


def coloured_fraction(image: np.ndarray) -> float:
    """Share of the pixels that are clearly coloured (saturation > 0.35): the figures' data; the
    report's text, tables and rules are black, grey or white."""
    hi, lo = image.max(axis=2), image.min(axis=2)
    saturation = np.where(hi > 0, (hi - lo) / np.maximum(hi, 1e-9), 0)
    return float((saturation > 0.35).mean())


@pytest.fixture(scope="module")
def report(experiment_dir, tmp_path_factory) -> Path:
    """A report of the synthetic campaign, with a trace section from two real numasim runs."""
    work = tmp_path_factory.mktemp("render")
    exp = work / "syn"
    shutil.copytree(experiment_dir, exp)
    traces, usage = [], {}
    for seed, label in ((7, "all default"), (8, "best")):
        tasks, transfers, _ = run_tiny(work, seed)
        traces.append(read_tasks(tasks))
        usage[label] = utilisation(traces[-1], read_transfers(transfers), 60)
    write_comparison(traces[0], traces[1], "seed 7", "seed 8", exp / "traces", ("all default", "best"), usage)
    out = work / "report"
    assert main(["report", "--experiment", f"syn={exp}", "--out", str(out), "--title", "Rendered",
                 "--platforms-dir", str(work / "none")]) == 0
    return out / "report.html"


def test_every_figure_is_a_captioned_png(report: Path):
    parser = Figures()
    parser.feed(report.read_text())
    assert parser.loose_images == 0
    names = [f["alt"] for f in parser.figures]
    # analysis (8 with the diagnostics), then the trace section's three
    assert len(names) == 11 and names[-3:] == ["durations-by-worker", "space-time", "utilisation"]
    assert {"residuals_fitted", "residuals_qq", "halfnormal_effects"} <= set(names)
    for fig in parser.figures:
        assert len(fig["caption"].split()) >= 10, f"{fig['alt']}: caption {fig['caption']!r}"
        assert fig["src"].startswith("data:image/png;base64,"), fig["alt"]
        png = base64.b64decode(fig["src"].split(",", 1)[1], validate=True)
        image = Image.open(io.BytesIO(png))
        image.verify()  # a whole, decodable PNG
        assert image.format == "PNG" and image.width >= 300 and image.height >= 200, fig["alt"]
        assert len(png) > 8000, f"{fig['alt']}: {len(png)} bytes"


def test_screenshot_shows_every_figure(report: Path, tmp_path: Path):
    image = screenshot(report, tmp_path / "report.png")
    height, width, _ = image.shape
    assert width == WIDTH
    # the page is at least as tall as its figures drawn at the width the page gives them
    parser = Figures()
    parser.feed(report.read_text())
    body = min(WIDTH, 70 * 16)  # CSS: body max-width 70em, img max-width 100%
    drawn = 0.0
    for fig in parser.figures:
        w, h = Image.open(io.BytesIO(base64.b64decode(fig["src"].split(",", 1)[1]))).size
        drawn += h * min(1.0, (body - 32) / w)
    assert height >= 0.95 * drawn > 3000
    # not blank: mostly white page, with dark text and coloured figure data
    assert image.std() > 0.15
    assert 0.9 > (image.mean(axis=2) > 0.97).mean() > 0.3
    assert coloured_fraction(image) > 0.01
    # the coloured pixels are spread down the page, as the figures are, not in one place
    rows = np.flatnonzero([coloured_fraction(image[i:i + 400]) > 0.002 for i in range(0, height, 400)])
    assert len(rows) >= 0.4 * (height // 400)


def test_screenshot_of_a_report_with_broken_images_fails_the_checks(report: Path, tmp_path: Path):
    """The checks above catch a report whose images do not decode: a control of the test itself."""
    text = report.read_text()
    broken = tmp_path / "broken.html"
    head, *parts = text.split("data:image/png;base64,")
    broken.write_text(head + "".join("data:image/png;base64,AAAA\"" + p.split('"', 1)[1] for p in parts))
    good = screenshot(report, tmp_path / "good.png")
    bad = screenshot(broken, tmp_path / "bad.png")
    assert bad.shape[0] < 0.5 * good.shape[0]
    assert coloured_fraction(bad) < 0.1 * coloured_fraction(good)


def test_no_markdown_shows_through(report: Path):
    """Every table of the page is an HTML table and every heading a heading: no `|---|`, no `# `
    line, no `![...](...)` among the visible text; the trace section's tables are among them."""
    text = report.read_text()
    assert raw_markdown(text) == []
    compare = (report.parent.parent / "syn" / "traces" / "compare.md").read_text()
    assert "|---|" in compare and compare.startswith("# ")  # what would show through
    trace = text.split('<section id="syn-traces-default-vs-best">', 1)[1].split("</section>", 1)[0]
    assert trace.count("<table") == compare.count("\n\n|") == 3  # makespan, kernel durations, idle time


def test_the_markdown_check_catches_the_page_of_earlier_versions(report: Path):
    """A control of the check above: the trace comparison shown as a preformatted block, as the
    report once did, is caught."""
    compare = (report.parent.parent / "syn" / "traces" / "compare.md").read_text()
    old = report.read_text().replace("</body>", f"<pre>{compare}</pre></body>")
    found = raw_markdown(old)
    assert any("---" in f for f in found) and any(f.lstrip().startswith("#") for f in found)


def test_screenshot_of_the_trace_section(report: Path, tmp_path: Path):
    """The trace section alone, on the report's page: its Markdown tables drawn as tables (one
    rule per row of compare.md's tables), its three figures in colour."""
    traces = report.parent.parent / "syn" / "traces"
    alone = tmp_path / "trace.html"
    alone.write_text(page("Trace section", [trace_section("syn", traces, report.parent)]))
    image = screenshot(alone, tmp_path / "trace.png")
    compare = (traces / "compare.md").read_text()
    rows = [ln for ln in compare.splitlines() if ln.startswith("|") and not re.fullmatch(r"\|[-:|]+\|?", ln)]
    assert len(rows) >= 6
    assert table_rules(image) >= len(rows)
    assert coloured_fraction(image) > 0.01
    # the same section as raw text (a <pre> block, the earlier page) draws no table
    pre = tmp_path / "pre.html"
    pre.write_text(alone.read_text().split("<h4>")[0] + f"<pre>{compare}</pre></section></section></body></html>")
    assert table_rules(screenshot(pre, tmp_path / "pre.png")) == 0
