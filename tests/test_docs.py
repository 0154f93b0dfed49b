"""The docs as a reader meets them: a README that is a front door (at most 200 lines, linking the docs that took
its sections), a table of contents on every page over 150 lines that names each of its sections, and no relative
link that leads nowhere (a file or a heading that is not there)."""

import re
import subprocess
from pathlib import Path

import pytest

from fixtures.docs import anchor, broken_links, contents, headings, links, with_contents

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(Path(p) for p in subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                                               check=True).stdout.split()
               if not (p.startswith("reports/") and p.endswith(("/REPORT.md", "/DETAILS.md"))))  # reports: generated


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert [t for level, t in headings(text) if level == 2][:3] == ["Quick start", "Your own study", "Layout"]
    for doc in ("docs/GUIDE.md", "docs/SCALING.md", "docs/DESIGN.md", "docs/REPORT_GUIDE.md",
                "benchmarks/RESULTS.md", "reports/README.md"):
        assert any(target.split("#")[0] == doc for target in links(text)), doc


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_a_long_page_has_contents_naming_each_section(page):
    text = (ROOT / page).read_text()
    if len(text.splitlines()) <= 150:
        return
    assert contents(text) in text, f"{page}: rerun fixtures.docs.with_contents on it"
    assert with_contents(text) == text


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_no_relative_link_leads_nowhere(page):
    assert broken_links(ROOT / page, ROOT) == []


def test_the_link_check_finds_what_it_looks_for(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## One: `x.y`\n\n[ok](#one-xy) [no](#two) [gone](b.md) [far](../x.md)\n"
                                   "```\n[in code](nowhere.md)\n```\n")
    assert anchor("One: `x.y`") == "one-xy"
    assert broken_links(tmp_path / "a.md", tmp_path) == ["a.md: #two (no such heading)", "a.md: b.md (no such file)",
                                                         "a.md: ../x.md (no such file)"]


# paths the tree names that are not its own: other projects' files, and folders a command would write
ELSEWHERE = ("experiments/DARS",  # DARS's own repository (docs/RECIPES.md, analysis/measures/recipes.py)
             "reports/my_study", "reports/a_vs_b",  # what an example command writes
             # what tests/test_extending.py adds to a copy of the project
             "grpo_lab/samplers/first_only", "grpo_lab/advantage/centered", "grpo_lab/tasks/doubles",
             "conf/sampler/first_only", "conf/algo/centered", "conf/task/doubles", "analysis/sections/prompts_drawn",
             "grpo_lab/rollout/counting_engine", "analysis/ingest/csvlog")
PATH = re.compile(r"(?<![\w./-])((?:grpo_lab|analysis|experiments|benchmarks|fixtures|tests|conf|docs|reports)/"
                  r"[\w./-]*\w)")


def test_every_path_the_tree_names_exists():
    """Docstrings, comments and docs that name a file of this project name one that is there (a module moved
    leaves no stale path behind)."""
    missing = []
    for name in subprocess.run(["git", "ls-files", "*.py", "*.md", "*.yaml", "*.toml"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split():
        if name.startswith("reports/") and name.endswith(("/REPORT.md", "/DETAILS.md")):
            continue  # generated: they name the report's own files, relative to it
        for match in PATH.finditer((ROOT / name).read_text(errors="replace")):
            path = match.group(1).rstrip(".")
            if any(c in path for c in "*<>{}") or path.startswith(ELSEWHERE):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{name}: {path}")
    assert missing == []


@pytest.mark.parametrize("package", ["grpo_lab", "analysis"])
def test_the_readme_layout_names_every_part_of_the_tree(package):
    """Every folder and module at the top of a package is named in its row of the README's layout table."""
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| `{package}/`"))
    parts = sorted(p.stem for p in (ROOT / package).iterdir()
                   if p.name not in ("__init__.py", "__main__.py", "__pycache__")
                   and (p.suffix == ".py" or (p / "__init__.py").exists()))
    assert [p for p in parts if f"`{p}" not in row] == []


def test_design_names_every_member_of_every_registry():
    """docs/DESIGN.md's flow names every sampler and advantage rule; its engine and ingest paragraphs every engine
    and tool the registries hold."""
    from analysis.ingest import TOOLS
    from grpo_lab.advantage import RULES
    from grpo_lab.rollout.engines import ENGINES
    from grpo_lab.samplers import SAMPLERS
    from grpo_lab.tasks import TASKS

    design = (ROOT / "docs" / "DESIGN.md").read_text()
    members = [*SAMPLERS, *RULES, *ENGINES, *TASKS, *TOOLS]
    assert [m for m in members if not re.search(rf"(?<![\w-]){m}(?![\w-])", design)] == []
