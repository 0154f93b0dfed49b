"""The viewer in a real browser: Debian's chromium, headless, driven by Playwright. The page opens from file:// with no
request leaving it; its filters list the groups a pandas recount of the run's tables selects; a deep link reopens the
same group; a heatmap cell opens its groups; hostile replies render as text and run nothing.

CI installs chromium (.ci/run) and sets GRPO_LAB_REQUIRE_BROWSER=1, so there a missing browser fails these tests;
elsewhere they are skipped without one."""

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.data.load import load
from analysis.view import build_view
from grpo_lab.config import TrainConfig
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# the flags a closed network needs (no background connections to refuse) and a root user needs (no sandbox)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
HOSTILE = ["<script>window.__pwned = 1</script>", "</script><script>window.__pwned = 2</script>",
           '<img src=x onerror="window.__pwned = 3">', '<a href="javascript:window.__pwned = 4">click</a>']


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("GRPO_LAB_REQUIRE_BROWSER"):
            pytest.fail(f"no chromium at {CHROMIUM}: CI installs Debian's chromium (.ci/run)")
        pytest.skip("no chromium here (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


class Page:
    """A page opened from disk, with every request it made and every error it raised."""

    def __init__(self, browser, url: str):
        self.requests, self.errors = [], []
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=60_000)

    def count(self) -> int:
        return int(self.page.get_attribute("#count", "data-count"))

    def set(self, **filters) -> None:
        for name, value in filters.items():
            selector = f"#filters [name={name}]"
            if name == "text":
                self.page.set_checked(selector, bool(value))
            elif self.page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
                self.page.select_option(selector, str(value))
            else:
                self.page.fill(selector, str(value))


def embedded(page_path: Path) -> dict:
    text = page_path.read_text()
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The committed 221-job tie_learning sweep's viewer (a sample of its million groups) and its groups table."""
    out = build_view(ROOT / "reports" / "tie_learning", tmp_path_factory.mktemp("sweep") / "viewer.html")
    tables = load(ROOT / "reports" / "tie_learning" / "data", tables=("groups",),
                  columns={"groups": ("step", "prompt_id", "difficulty", "round", "tie", "n_correct", "group_size",
                                      "truncated")})
    groups = tables.groups
    groups = groups.assign(arm=groups["arm"].astype(str), seed=groups["seed"].astype(int),
                           prompt_id=groups["prompt_id"].astype(str), difficulty=groups["difficulty"].astype(str))
    data = embedded(out)
    units = set(zip(data["groups"]["step"], data["groups"]["prompt"]))
    on_page = groups[[u in units for u in zip(groups["step"], groups["prompt_id"])]]
    return out, groups, on_page


def test_the_sweep_opens_from_disk_with_no_request_leaving_it(browser, sweep):
    out, _, on_page = sweep
    page = Page(browser, out.as_uri())
    assert page.requests == [out.as_uri()] and page.errors == []
    held = sum(1 for _ in embedded(out)["groups"]["src"] if _ == 1)
    assert page.count() == len(on_page) + held  # every training group of the sampled units, and the held-out ones
    assert "of 1,007,622 groups on this page" in page.page.text_content("#summary")


@pytest.mark.parametrize("filters, truth", [
    ({"arm": "dynamic", "kind": "all_wrong", "src": "0"},
     lambda g: (g.arm == "dynamic") & g.tie & (g.n_correct == 0)),
    ({"seed": "3", "diff": "2", "from": "20", "to": "60", "src": "0"},
     lambda g: (g.seed == 3) & (g.difficulty == "2") & g.step.between(20, 60)),
    ({"arm": "spo", "kind": "mixed", "src": "0"}, lambda g: (g.arm == "spo") & ~g.tie),
    ({"kind": "all_wrong", "q": "l4-9", "src": "0"},
     lambda g: g.tie & (g.n_correct == 0) & g.prompt_id.str.lower().str.contains("l4-9", regex=False)),
    ({"kind": "all_correct", "diff": "1", "src": "0"}, lambda g: g.tie & (g.n_correct == g.group_size)
     & (g.difficulty == "1")),
    ({"cut": "some", "src": "0"}, lambda g: g.truncated > 0),
])
def test_filters_list_the_groups_a_pandas_recount_selects(browser, sweep, filters, truth):
    out, _, on_page = sweep
    page = Page(browser, out.as_uri())
    page.set(**filters)
    expected = int(truth(on_page).sum())
    assert expected > 0 and page.count() == expected
    assert page.errors == []


def test_a_deep_link_reopens_the_same_group_with_the_same_filters(browser, sweep):
    out, _, _ = sweep
    first = Page(browser, out.as_uri())
    first.set(arm="mopps", kind="all_wrong", diff="3")
    first.page.click("#list li[data-key] >> nth=3")
    key = first.page.get_attribute("#list li.open", "data-key")
    heading = first.page.text_content("#detail h2")
    url = first.page.evaluate("location.href")
    assert "g=" in url and "arm=mopps" in url
    again = Page(browser, url)
    assert again.page.get_attribute("#list li.open", "data-key") == key
    assert again.page.text_content("#detail h2") == heading
    assert again.page.input_value("#filters [name=arm]") == "mopps" and again.count() == first.count()


def test_a_heatmap_cell_opens_its_groups(browser, sweep):
    out, groups, on_page = sweep
    page = Page(browser, out.as_uri() + "#view=heat")
    cell = page.page.locator('table.heat[data-arm="ar3po"] td.cell a').nth(5)
    title = cell.get_attribute("title")  # "ar3po, difficulty 1, steps 41–48: 128 groups, 116 tied (...)"
    d, lo, hi, n, ties = re.match(r"ar3po, difficulty (\S+), steps (\d+)–(\d+): (\d+) groups, (\d+) tied",
                                  title).groups()
    # the cell's numbers are over every first-round group of the run, not only this page's
    first = groups[(groups.arm == "ar3po") & (groups.difficulty == d) & groups.step.between(int(lo), int(hi))
                   & (groups["round"] == 0)]
    assert (len(first), int(first.tie.sum())) == (int(n), int(ties))
    cell.click()
    page.page.wait_for_selector("#groups-view:not([hidden])")
    listed = on_page[(on_page.arm == "ar3po") & (on_page.difficulty == d) & on_page.step.between(int(lo), int(hi))]
    assert page.count() == len(listed)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A real tiny run whose kept replies and prompts are then replaced by hostile text (model output is untrusted)."""
    out = tmp_path_factory.mktemp("hostile") / "run"
    cfg = TrainConfig(out_dir=str(out), max_steps=2, prompts_per_step=4, checkpoint_every=2, log_completions=8)
    cfg.task.levels = [1, 2]
    cfg.task.train_per_level = 8
    cfg.task.eval_per_level = 2
    cfg.sampler.group_size = 4
    cfg.eval.n = 4
    train(cfg)
    for part in sorted((out / "completions").glob("part-*.parquet")):
        table = pq.read_table(part)
        texts = [HOSTILE[i % len(HOSTILE)] for i in range(table.num_rows)]
        table = table.set_column(table.schema.get_field_index("completion"), "completion", pa.array(texts))
        table = table.set_column(table.schema.get_field_index("prompt"), "prompt",
                                 pa.array([HOSTILE[1]] * table.num_rows))
        pq.write_table(table, part)
    return build_view(out), pd.concat([pq.read_table(p).to_pandas()
                                       for p in sorted((out / "completions").glob("part-*.parquet"))])


def test_hostile_replies_render_as_text_and_run_nothing(browser, hostile):
    out, kept = hostile
    page = Page(browser, out.as_uri())
    page.set(text=True, src="0")
    assert page.count() == kept.groupby(["step", "group"]).ngroups
    for n in range(page.count()):
        page.page.click(f"#list li[data-key] >> nth={n}")
        cells = page.page.eval_on_selector_all("#detail td.reply", "els => els.map(e => e.textContent)")
        assert cells and all(c in HOSTILE for c in cells)
        assert page.page.text_content("#detail pre.prompt") == HOSTILE[1]
    assert page.page.evaluate("typeof window.__pwned") == "undefined"
    injected = "#detail img, #detail script, main a[href^='javascript']"
    assert page.page.eval_on_selector_all(injected, "e => e.length") == 0
    page.set(q="onerror")  # search finds the text as text
    assert page.count() > 0 and page.errors == [] and page.requests == [out.as_uri()]
