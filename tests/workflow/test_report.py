"""The HTML report as a user makes and reads it: the README's commands run as written from a
foreign folder, a report left from before a rerun, and the report in a real browser."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workflow.helpers import REPO, snakemake
from tests.workflow.slurm_cluster import in_ci

pytestmark = pytest.mark.e2e

REPORT = Path("results/report.html")


def readme_sweep_commands() -> list[str]:
    """The command lines of the README's "Your own sweep" block."""
    section = (REPO / "README.md").read_text().split("## Your own sweep")[1]
    block = section.split("```bash\n")[1].split("```")[0]
    return [line for line in block.splitlines() if line.strip()]


def run_as_written(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """A README command line run in ``cwd``, with this checkout's Snakefile for the README's
    placeholder and this interpreter's Snakemake (its folder first on PATH, as in a venv)."""
    words = shlex.split(line.replace("/path/to/batchscope/Snakefile", str(REPO / "Snakefile")))
    assert words[0] == "snakemake", line
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *words[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.fixture(scope="module")
def report_html(fmnist_run, tmp_path_factory) -> Path:
    """The shared tiny sweep's report, written again by the README's commands run as written
    from another folder (the sweep is `my-sweep` there, its config `my.yaml`)."""
    workdir, config = fmnist_run
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "my-sweep").symlink_to(workdir, target_is_directory=True)
    (elsewhere / "my.yaml").write_text(config.read_text())
    (workdir / REPORT).unlink(missing_ok=True)
    commands = readme_sweep_commands()
    assert len(commands) == 2 and "--report" in commands[1]
    for line in commands:
        done = run_as_written(line, elsewhere)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    return workdir / REPORT


def test_the_readme_commands_run_as_written_from_another_folder(report_html):
    # the sweep had run already: the first command has nothing to do, the second writes the
    # report where the README says (my-sweep/results/report.html)
    html = report_html.read_text()
    assert "recommendation.html" in html and "throughput.png" in html


def test_a_run_that_does_a_job_removes_the_report_from_before_it(fmnist_run, report_html):
    workdir, config = fmnist_run
    nothing = snakemake(workdir, "--cores", "1", "--configfile", str(config))
    assert nothing.returncode == 0 and report_html.exists()  # nothing to do: still current
    (workdir / "results/recommendation.md").unlink()  # as if the answer changed: one job
    try:
        again = snakemake(workdir, "--cores", "1", "--configfile", str(config))
        assert again.returncode == 0, again.stderr[-3000:]
        assert not report_html.exists()
        said = [line for line in again.stderr.splitlines() if line.startswith("batchscope:")]
        assert said == [
            "batchscope: removed results/report.html, made from the results this run replaces;"
            " write it again with this command's --directory and --configfile and"
            " `--report results/report.html`"
        ]
    finally:  # the report again, for the tests after this one
        snakemake(workdir, "--cores", "1", "--configfile", str(config), "--report", str(REPORT))


CHROMIUM = Path("/usr/bin/chromium")
WIDTH_PX = 1280
#: The source of what the report shows of a figure (its image) or a document (its frame), or ''.
SHOWN = """() => {
    const shown = document.querySelector('img[src^="data:image/png"], iframe');
    return shown === null ? '' : shown.src;
}"""


def require_browser():
    """Playwright's sync API and Debian's chromium; without them skip, or under CI fail."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the Python package playwright (the dev extra)")
        sync_playwright = None
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if missing:
        reason = "the browser test needs " + " and ".join(missing)
        if in_ci():
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)
    return sync_playwright


def overflow(frame) -> list[str]:
    """What sticks out to the right of ``frame``'s viewport: the page itself, or a table or
    figure (a table scrolled inside its own box still hides its last columns)."""
    return frame.evaluate(
        """() => {
            const width = document.documentElement.clientWidth, found = [];
            if (document.documentElement.scrollWidth > width)
                found.push(`page ${document.documentElement.scrollWidth} > ${width} px`);
            for (const e of document.querySelectorAll('table, img')) {
                const right = Math.round(e.getBoundingClientRect().right);
                if (right > width) found.push(`${e.tagName} ends at ${right} > ${width} px`);
            }
            return found;
        }"""
    )


def test_the_report_in_a_browser_shows_every_figure_and_the_recommendation_whole(report_html):
    sync_playwright = require_browser()
    figures = {p.name for p in (report_html.parent / "plots").glob("*.png")}
    assert figures, "the sweep made no figure"
    url = report_html.resolve().as_uri()
    requests, errors, seen, too_wide = [], [], set(), []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH_PX, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            # the sidebar's categories: the items after its "Results" heading
            links = page.locator("xpath=//li[normalize-space()='Results']/following-sibling::li/a")
            categories = [link.inner_text().strip() for link in links.all()]
            assert "Recommendation" in categories, categories
            for category in categories:
                page.get_by_text(category, exact=True).click()
                # a table's eye is a download link (a CSV opens in another program)
                shows = page.locator("tr a[iconname=eye]:not([download])")
                for i in range(shows.count()):
                    row = shows.nth(i).locator("xpath=ancestor::tr[1]")
                    name = row.locator("td").first.inner_text()
                    before = page.evaluate(SHOWN)
                    shows.nth(i).click()
                    page.wait_for_function(f"was => ({SHOWN})() !== was", arg=before)
                    too_wide += [f"{category}/{name}: {o}" for o in overflow(page)]
                    for image in page.locator('img[src^="data:image/png"]').all():
                        page.wait_for_function(
                            "e => e.complete && e.naturalWidth > 0", arg=image.element_handle()
                        )
                        seen.add(image.get_attribute("src").split("filename=")[1].split(";")[0])
                    if page.locator("iframe").count():
                        frame = page.locator("iframe").element_handle().content_frame()
                        frame.wait_for_load_state()
                        too_wide += [f"{category}/{name} (frame): {o}" for o in overflow(frame)]
                        seen.add(frame.title())
                        if frame.title() == "batchscope recommendation":  # the `note` column
                            assert frame.locator("th", has_text="note").first.is_visible()
                page.get_by_text("Results", exact=True).first.click()  # the breadcrumb
        finally:
            browser.close()
    assert figures <= seen, f"figures never shown: {sorted(figures - seen)}"
    assert "batchscope recommendation" in seen
    assert too_wide == []
    assert errors == []
    assert [u for u in requests if u != url and not u.startswith(("data:", "blob:"))] == []
