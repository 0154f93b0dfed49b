""""as the paper" only where the recipe is verified: each recipe's `verified` flag (analysis/measures/recipes.py)
is the one docs/RECIPES.md states under the method's heading, and the page's own words back it (a verified recipe's
official code was read at a commit; an unverified one says what was not read, found or verified)."""

import re
from pathlib import Path

import pandas as pd

from analysis.measures.recipes import RECIPES, recipe_rows

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "RECIPES.md").read_text()
HEDGES = ("not verified", "not re-read", "not read", "not found", "not reachable")


def sections() -> dict[str, tuple[str, str]]:
    """Each method's section of RECIPES.md by the first arm its heading names (the RECIPES key): (title, text)."""
    found = {}
    for part in re.split(r"^## ", PAGE, flags=re.M)[1:]:
        heading, _, text = part.partition("\n")
        arms = re.findall(r"`([a-z0-9_]+)`", heading)
        if ": arm" in heading and arms:
            found[arms[0]] = (heading.split(":")[0], text)
    return found


def stated(text: str) -> bool | None:
    """The section's own line, "**Verified: yes.**" or "**Verified: no.**" (None: it has none)."""
    match = re.search(r"\*\*Verified: (yes|no)\.\*\*", text)
    return None if match is None else match.group(1) == "yes"


def code_commit(title: str) -> bool:
    """Whether the Sources table names official code read at a commit for the method of section `title`."""
    for row in re.findall(r"^\| (.+?) \| .+? \| (.+?) \|$", PAGE, flags=re.M):
        if title.startswith(row[0]) and row[0] != "method":
            return re.search(r"\([0-9a-f]{10,12}\)", row[1]) is not None
    return False


def test_every_published_recipe_has_its_section_and_the_flag_it_states():
    found = sections()
    published = {key for key, recipe in RECIPES.items() if recipe.published}
    assert published <= set(found), published - set(found)
    for key in published:
        title, text = found[key]
        assert stated(text) is not None, f"{title}: no **Verified: yes/no.** line"
        assert RECIPES[key].verified == stated(text), (key, RECIPES[key].verified, stated(text))


def test_the_pages_words_back_each_flag():
    for title, text in sections().values():
        if stated(text):  # verified: its official code was read at a commit
            assert code_commit(title), f"{title}: verified, but the Sources table names no code read at a commit"
        else:  # not verified: the section says what was not read, found or verified
            body = text.replace(re.search(r"\*\*Verified: no\.\*\*.*?\n\n", text, flags=re.S).group(0), "")
            assert any(h in body for h in HEDGES), f"{title}: not verified, but says nowhere why"


def test_as_the_paper_is_said_only_of_verified_recipes():
    """Every arm of every method with no departure: "as the paper" exactly where the recipe is verified (MoPPS,
    AR3PO, RL-ZVP and GRPO are not: docs/RECIPES.md)."""
    as_paper, unverified = "as the paper", "none from the values found, which are not verified (docs/RECIPES.md)"
    mopps = {"sampler.mopps.prior_alpha": 1.0, "sampler.mopps.prior_beta": 1.0, "sampler.mopps.decay": 0.5,
             "sampler.mopps.target": 0.5, "sampler.mopps.candidates": 8, "sampler.mopps.selection": "thompson"}
    configs = {"grpo": {}, "mopps": {"sampler.name": "mopps", **mopps}, "ar3po": {"sampler.name": "ar3po"},
               "rl_zvp_paper": {"algo.advantage": "rl_zvp", "algo.eps_high": 0.28, "algo.beta": 0.0,
                                "algo.loss_agg": "token"},
               "pods_paper": {"sampler.name": "pods", "sampler.group_size": 8, "sampler.pods.n": 32,
                              "algo.std": "sample", "algo.std_eps": 1e-4, "algo.beta": 0.0}}
    base = {"algo.advantage": "grpo", "sampler.name": "fixed", "sampler.group_size": 8, "sampler.pods.n": 16,
            "algo.eps_low": 0.2, "algo.eps_high": 0.2, "algo.beta": 0.04, "algo.loss_agg": "sequence",
            "algo.std": "population", "algo.std_eps": 1e-8, "algo.mu": 1, "algo.zvp_alpha": 0.1}
    jobs = pd.DataFrame([{"job": name, "arm": name, "seed": 0, **base, **keys} for name, keys in configs.items()])
    rows = recipe_rows(jobs, ["arm"]).set_index("arm")
    for name in ("grpo", "mopps", "ar3po", "rl_zvp_paper"):
        assert rows.loc[name, "departures"] == unverified, name
    assert rows.loc["pods_paper", "departures"] == as_paper and rows.loc["pods_paper", "verified"] == "yes"
    for name in ("grpo", "mopps", "ar3po", "rl_zvp_paper"):
        assert rows.loc[name, "verified"] == "no", name
    assert not RECIPES["mopps"].verified and not RECIPES["ar3po"].verified and not RECIPES["rl_zvp"].verified
