"""The documentation site builds strictly and offline; its pages stay short enough to read."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.conftest import DOCS, ROOT

MAX_PAGE_LINES = 400
MAX_README_LINES = 150


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as CI builds it: warnings are errors (broken links and anchors, unknown references, docstrings that
    do not parse), every reference checked (-n), from scratch, with no network proxy to reach anything through."""
    output = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html"]
    command += [str(DOCS), str(output / "html"), "-d", str(output / "doctrees")]
    environment = {**os.environ, "no_proxy": "*", "http_proxy": "http://0.0.0.0:9", "https_proxy": "http://0.0.0.0:9"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, f"the docs build failed:\n{result.stdout}\n{result.stderr}"
    return output / "html"


def test_every_page_is_built_and_in_the_navigation(site: Path) -> None:
    pages = {path.relative_to(DOCS).with_suffix("") for path in DOCS.rglob("*.md")}
    wanted = {"index", "tutorial", "install", "benchmarks", "output-files", "reference/commands"}
    wanted |= {"how-to/troubleshooting", "how-to/python-api"}
    assert {Path(page) for page in wanted} <= pages
    built = {path.relative_to(site).with_suffix("") for path in site.rglob("*.html")}
    assert pages <= built
    # Every page but the generated commands' own is in a toctree of the index (Sphinx warns, -W fails, for a page
    # in none): the index's toctrees name the top-level ones.
    navigation = (site / "index.html").read_text(encoding="utf-8")
    for page in pages - {Path("index")}:
        if page.parts[:2] != ("reference", "commands"):
            assert f'href="{page.as_posix()}.html"' in navigation, f"{page} is not in the site's navigation"


def test_the_site_references_nothing_remote(site: Path) -> None:
    """Scripts, styles, fonts and images come with the site: it opens offline."""
    for page in site.rglob("*.html"):
        remote = re.findall(r"""<(?:script|link|img)[^>]*(?:src|href)=["'](?:https?:)?//[^"']*""", page.read_text())
        assert not remote, f"{page.relative_to(site)}: {remote}"
    for style in site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", style.read_text()), style.relative_to(site)


def test_no_page_is_longer_than_a_reader_reads() -> None:
    for page in DOCS.rglob("*.md"):
        lines = len(page.read_text(encoding="utf-8").splitlines())
        assert lines <= MAX_PAGE_LINES, f"{page.relative_to(ROOT)} has {lines} lines (at most {MAX_PAGE_LINES})"


def test_the_readme_is_a_landing_page() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_the_readme_links_only_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_links_into_the_site_land_on_their_anchors(site: Path) -> None:
    """The README's links into docs/ (a new user's first click) name pages and headings the site has."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(docs/([^)#\s]+)\.md(?:#([^)]*))?\)", readme)
    for page, anchor in links:
        html = (site / f"{page}.html").read_text(encoding="utf-8")
        assert not anchor or f'id="{anchor}"' in html, f"README.md: docs/{page}.md has no heading #{anchor}"
    targets = {f"{page}#{anchor}" if anchor else page for page, anchor in links}
    # What a new user comes for, one click from the README.
    wanted = {"tutorial", "how-to/clusters", "how-to/annotation#review-in-label-studio", "benchmarks#reader-throughput"}
    assert wanted <= targets, wanted - targets
