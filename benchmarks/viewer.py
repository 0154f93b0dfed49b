"""How long the viewer takes to build, open and filter: `python benchmarks/viewer.py [REPORT_OR_SWEEP] [--repeats N]`.

Builds the page (default: the committed 221-job tie_learning sweep, a million groups), then opens it from disk in
headless chromium N times, timing the load (navigation to the page's ready mark) and, in the page, each filter
alone (a control changed, the list redrawn and counted) and the heatmap tab. Prints one table of medians (min-max) and
the machine's CPU flags; docs go in benchmarks/RESULTS.md ("The group viewer").
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from analysis.view import build_view

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
# (what is timed, the control, its value): each a step of what a reader does
ACTIONS = [("arm", "select", "arm", "dynamic"), ("tie kind", "select", "kind", "all_wrong"),
           ("difficulty", "select", "diff", "3"), ("step range", "input", "from", "20"),
           ("search 'l4-9'", "input", "q", "l4-9"), ("clear", "reset", "", "")]
# each action from a cleared form (the clearing untimed; "clear" times clearing one filter)
TIMED = """([kind, name, value]) => {
  const form = document.getElementById("filters");
  const redraw = () => form.dispatchEvent(new Event("input"));
  form.reset(); redraw();
  if (kind === "reset") { form.elements.arm.value = "dynamic"; redraw(); }
  const t0 = performance.now();
  if (kind === "reset") { form.reset(); redraw(); }
  else { form.elements[name].value = value; redraw(); }
  return [performance.now() - t0, Number(document.getElementById("count").dataset.count)];
}"""


def cpu_flags() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_tile")
    return " ".join(f for f in wanted if f" {f}" in flags)


def span(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", nargs="?", default=str(ROOT / "reports" / "tie_learning"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(tempfile.mkdtemp()) / "viewer.html"
    t0 = time.perf_counter()
    build_view(args.path, out)
    built = time.perf_counter() - t0
    size = out.stat().st_size / 2**20
    loads, heat, actions = [], [], {a[0]: [] for a in ACTIONS}
    counts = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=FLAGS)
        for _ in range(args.repeats):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            t0 = time.perf_counter()
            page.goto(out.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            loads.append(1000 * (time.perf_counter() - t0))
            for label, kind, name, value in ACTIONS:
                ms, count = page.evaluate(TIMED, [kind, name, value])
                actions[label].append(ms)
                counts[label] = count
            t0 = time.perf_counter()
            page.click("#tabs button[data-view=heat]")
            page.wait_for_selector("#heat-view:not([hidden])")
            heat.append(1000 * (time.perf_counter() - t0))
            page.close()
        browser.close()
    when = time.strftime("%Y-%m-%d %H:%M")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, flags {cpu_flags()}; {when} UTC, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"page: {args.path}: built in {built:.1f} s, {size:.1f} MiB")
    print("| action | ms, median (min-max) over opens | groups listed after it |\n|---|---|---|")
    print(f"| open from disk to ready | {span(loads)} | |")
    for label, _, _, _ in ACTIONS:
        print(f"| filter: {label} | {span(actions[label])} | {counts[label]:,} |")
    print(f"| heatmap tab | {span(heat)} | |")
    shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
