"""The docs' cross-references: every relative link and image in README.md and docs/ resolves, with
its #anchor, and every section that the code, tests, scripts and docs cite by name, as
(docs/X.md, "Name"), or as "Name" in docs/X.md, exists in that page as a heading or a bold
paragraph lead."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATEX = {r"$\nu$": "ν", r"$\sigma$": "σ", r"$\alpha$": "α"}


def tracked(*suffixes) -> list:
    """The repository's files with these endings (git's list when there is one), runs/ left out."""
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        files = out.split()
    except (OSError, subprocess.CalledProcessError):
        files = [
            os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(ROOT) for f in fs
        ]
    return [f for f in files if f.endswith(suffixes) and not f.startswith("runs/")]


def outside_code_blocks(text: str) -> list:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def plain(name: str) -> str:
    for tex, letter in LATEX.items():
        name = name.replace(tex, letter)
    return re.sub(r"[`*]", "", name).strip().rstrip(".:").strip().lower()


def sections(path: str) -> set:
    """The names a page can be cited by: its headings and the bold leads of its paragraphs and
    list items."""
    names = set()
    for line in outside_code_blocks(Path(path).read_text(encoding="utf-8")):
        heading = re.match(r"#+ (.*)", line)
        if heading:
            names.add(plain(heading.group(1)))
        lead = re.match(r"\s*(?:[-*] |\d+\. )?\*\*(.+?)\*\*", line)
        if lead:
            names.add(plain(lead.group(1)))
    return names


def anchors(path: str) -> set:
    return {
        slug(m.group(1))
        for line in outside_code_blocks(Path(path).read_text(encoding="utf-8"))
        for m in [re.match(r"#+ (.*)", line)]
        if m
    }


def links(path: str) -> list:
    text = "\n".join(outside_code_blocks(Path(path).read_text(encoding="utf-8")))
    return [
        m.group(1)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"[a-z]+:", m.group(1))
    ]


def citations(path: str) -> list:
    """(page, name) for every `docs/X.md, "Name"` and `"Name" in docs/X.md` in a file, with comment
    markers and line breaks joined."""
    text = Path(ROOT, path).read_text(encoding="utf-8")
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return re.findall(r"(docs/[\w/]+\.md), \"([^\"]+)\"", text) + [
        (page, name) for name, page in re.findall(r"\"([^\"]+)\" in `?(docs/[\w/]+\.md)", text)
    ]


def cites(page: str, name: str) -> bool:
    """Whether page has a section of that name, or whose name begins with it ("The Table 3 anchors"
    for "The Table 3 anchors: steps to TRPO's score")."""
    path = os.path.join(ROOT, page)
    return os.path.exists(path) and any(
        section.startswith(plain(name)) for section in sections(path)
    )


def test_links_and_anchors_resolve():
    broken = []
    for page in tracked(".md"):
        path = os.path.join(ROOT, page)
        for target in links(path):
            file, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_sections_cited_by_name_exist():
    cited = [
        (f, page, name)
        for f in tracked(".py", ".sh", ".md")
        if f != "tests/test_docs.py"  # its own examples
        for page, name in citations(f)
    ]
    assert len(cited) >= 5  # the scripts cite their pages this way: none would mean it broke
    missing = [f'{f}: ({page}, "{name}")' for f, page, name in cited if not cites(page, name)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    "text, ok",
    [("**Why the screen is at 300.** Whether", True), ("Why the screen is at 300. Whether", False)],
)
def test_a_citation_needs_a_heading_or_a_bold_lead(tmp_path, text, ok):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n" + text + "\n", encoding="utf-8")
    assert ("why the screen is at 300" in sections(str(page))) is ok


def test_anchors_follow_github():
    assert (
        slug("Episodes to the paper's thresholds (MuJoCo v5)")
        == "episodes-to-the-papers-thresholds-mujoco-v5"
    )
    assert slug("BipedalWalker-v3, the default command") == "bipedalwalker-v3-the-default-command"


def test_the_readme_starts_with_the_commands():
    """A newcomer's README: the set-up and the three commands in its first 40 lines."""
    lines = Path(ROOT, "README.md").read_text().splitlines()
    first = "\n".join(lines[:40])
    for command in (
        "pip install -r requirements.txt",
        "python ars.py --env BipedalWalker-v3",
        "python -m pytest",
    ):
        assert command in first, command


def test_every_bench_script_is_cited_and_feeds_docs_results():
    """docs/bench/ holds only the scripts behind a published figure or table: each is named in the
    README or a docs page, and reads or appends docs/results/."""
    pages = "".join(Path(ROOT, f).read_text() for f in tracked(".md") if not f.startswith("tests/"))
    bench = os.path.join(ROOT, "docs", "bench")
    for name in sorted(os.listdir(bench)):
        if not name.endswith((".py", ".sh")):
            continue
        text = Path(bench, name).read_text()
        assert f"docs/bench/{name}" in pages, f"{name} is cited nowhere"
        assert "docs/results" in text or re.search(
            r"from results_csv import|results_csv\.py", text
        ), name


def test_every_results_table_is_rendered_from_its_rows():
    """The marked blocks of README.md and docs/*.md are what docs/bench/tables.py renders from
    docs/results/ today; a block edited by hand, or a row changed without rendering, fails."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "docs", "bench", "tables.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
    import tables

    page = Path(ROOT, "docs", "results", "README.md").read_text()
    assert "<!-- table: es_basic_solves -->" in page
    edited = page.replace("2,000 episodes (1,500-2,500)", "2,000 episodes (1,500-2,000)", 1)
    here = "docs/results/README.md"
    assert edited != page and tables.render(edited, here)[1] == ["es_basic_solves"]
    assert tables.render(page, here)[1] == []


def test_triples_counted_by_hand():
    # Seeds 10, 20, 40 and never against a paper's 20: the triples (10, 20, 40), (10, 20, inf),
    # (10, 40, inf), (20, 40, inf) have medians 20, 20, 40, 40 and averages 23.3, inf, inf, inf.
    sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
    import tables

    counts = tables.triple_counts([10, 20, 40, math.inf], 20)
    assert counts == {"triples": 4, "median": 2, "average": 0, "single": 2}
    assert tables.triple_counts([10, 20, 40, math.inf], 25)["average"] == 1
