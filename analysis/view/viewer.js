// grpo-lab's group viewer: one page, no server, no network. Every piece of model or task text reaches the page
// through textContent or a text node, never as markup: a reply holding a script tag or an onerror attribute is shown
// as the characters it is.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const G = D.groups;
  const N = G.step.length;
  const PAGE = 200;
  const KIND_NAMES = { all_wrong: "all wrong", all_correct: "all correct", other: "tied, partial", mixed: "not tied" };
  const form = document.getElementById("filters");
  const list = document.getElementById("list");
  const detail = document.getElementById("detail");
  const FIELDS = ["arm", "seed", "from", "to", "kind", "ans", "diff", "cut", "src", "text", "q"];

  // ---- small DOM helpers: text only ----
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "title") node.title = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }
  const fmt = (x, digits) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  const plural = (n, word) => `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;

  // ---- each row's derived values, once ----
  const job = (i) => D.jobs[G.job[i]];
  const keys = new Array(N);
  const byKey = new Map();
  const seen = new Map();
  for (let i = 0; i < N; i++) {
    const base = `${job(i).name}/${G.step[i]}/${G.prompt[i]}/${G.round[i]}/${G.src[i]}`;
    const k = seen.get(base) || 0;
    seen.set(base, k + 1);
    keys[i] = k ? `${base}#${k}` : base;
    byKey.set(keys[i], i);
  }
  const haystack = new Array(N);
  for (let i = 0; i < N; i++) {
    const parts = [G.prompt[i]];
    const t = G.text[i] >= 0 ? D.replies[G.text[i]] : null;
    if (t) {
      if (t.prompt) parts.push(t.prompt);
      for (const s of t.samples) parts.push(s.text, s.answer || "");
    }
    haystack[i] = parts.join("\n").toLowerCase();
  }
  const units = new Map(); // (job, step, prompt, src) -> rows: a prompt's rounds at one step
  const across = new Map(); // (step, prompt, src) -> rows: the same prompt at one step in every job
  for (let i = 0; i < N; i++) {
    const u = `${G.job[i]}/${G.step[i]}/${G.prompt[i]}/${G.src[i]}`;
    const a = `${G.step[i]}/${G.prompt[i]}/${G.src[i]}`;
    if (!units.has(u)) units.set(u, []);
    units.get(u).push(i);
    if (!across.has(a)) across.set(a, []);
    across.get(a).push(i);
  }
  const cutOff = (i) => G.truncated[i];

  // ---- the header ----
  document.getElementById("title").textContent = `${D.title}: every group`;
  const s = D.sample;
  document.getElementById("summary").textContent =
    `${s.shown.toLocaleString("en")} of ${s.total.toLocaleString("en")} groups on this page ` +
    `(${s.train_total.toLocaleString("en")} training draws` +
    (s.held_out_total ? `, ${s.held_out_total.toLocaleString("en")} held-out groups of the base evaluation with their replies` : "") +
    `); ${plural(D.jobs.length, "job")}, ${plural(D.arms.length, "arm")}` +
    (D.arms.length > 1 && D.arm_keys.length ? ` told apart by ${D.arm_keys.join(", ")}` : "") + `. Source: ${D.source}.`;
  document.getElementById("rule").textContent = s.rule;
  if (!s.whole) document.getElementById("how").open = true;

  // ---- filters ----
  function options(select, values, anyLabel) {
    select.appendChild(el("option", { value: "" }, anyLabel));
    for (const v of values) select.appendChild(el("option", { value: String(v) }, String(v)));
  }
  const seeds = [...new Set(D.jobs.map((j) => j.seed).filter((x) => x !== null))].sort((a, b) => a - b);
  const diffs = D.difficulties;  // in the order the runs recorded (natural order where none did)
  options(form.elements.arm, D.arms, "every arm");
  options(form.elements.seed, seeds, "every seed");
  options(form.elements.diff, diffs, "every difficulty");

  function current() {
    const f = {};
    for (const name of FIELDS) {
      const input = form.elements[name];
      f[name] = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
    }
    return f;
  }
  function setFilters(f) {
    for (const name of FIELDS) {
      const input = form.elements[name];
      if (input.type === "checkbox") input.checked = f[name] === "1";
      else input.value = f[name] || "";
    }
  }
  function answersOf(i) {
    const a = G.answered[i];
    if (a < 0) return "unknown";
    if (a === G.rewards[i].length) return "all";
    return a === 0 ? "none" : "some";
  }
  function matches(i, f) {
    if (f.arm && job(i).arm !== f.arm) return false;
    if (f.seed && String(job(i).seed) !== f.seed) return false;
    if (f.from !== "" && G.step[i] < Number(f.from)) return false;
    if (f.to !== "" && G.step[i] > Number(f.to)) return false;
    if (f.kind === "tied" ? G.kind[i] === "mixed" : f.kind && G.kind[i] !== f.kind) return false;
    if (f.ans) {
      const a = answersOf(i);
      if (f.ans === "some" ? !(a === "some" || a === "none") : a !== f.ans) return false;
    }
    if (f.diff && G.difficulty[i] !== f.diff) return false;
    if (f.cut === "some" && !(cutOff(i) > 0)) return false;
    if (f.cut === "none" && cutOff(i) !== 0) return false;
    if (f.src !== "" && String(G.src[i]) !== f.src) return false;
    if (f.text && G.text[i] < 0) return false;
    if (f.q && !haystack[i].includes(f.q.toLowerCase())) return false;
    return true;
  }

  // ---- the hash: filters, the open group and the tab ----
  let openKey = "";
  let view = "groups";
  function writeHash() {
    const f = current();
    const params = new URLSearchParams();
    for (const name of FIELDS) if (f[name]) params.set(name, f[name]);
    if (openKey) params.set("g", openKey);
    if (view !== "groups") params.set("view", view);
    const hash = params.toString();
    history.replaceState(null, "", hash ? `#${hash}` : location.pathname + location.search);
  }
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const f = {};
    for (const name of FIELDS) f[name] = params.get(name) || "";
    setFilters(f);
    openKey = params.get("g") || "";
    view = params.get("view") === "heat" ? "heat" : "groups";
  }

  // ---- the list ----
  let shown = [];
  let limit = PAGE;
  function dots(i) {
    const box = el("span", { class: "dots" });
    const r = G.rewards[i], c = G.correct[i];
    for (let k = 0; k < r.length; k++) {
      const cls = c && c[k] ? "c" : r[k] > 0 ? "p" : "w";
      box.appendChild(el("span", { class: `dot ${cls}`, title: `reply ${k + 1}: reward ${fmt(r[k], 3)}` }));
    }
    return box;
  }
  function advantageBars(i) {
    const a = G.advantages[i];
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    const w = 4 * (G.rewards[i].length || 1) + 2;
    svg.setAttribute("class", "adv");
    svg.setAttribute("width", String(w));
    svg.setAttribute("height", "14");
    const title = document.createElementNS(NS, "title");
    title.textContent = a ? `advantages: ${a.map((x) => fmt(x, 2)).join(" ")}` : "advantages not recorded";
    svg.appendChild(title);
    const mid = document.createElementNS(NS, "line");
    for (const [k, v] of [["x1", 0], ["x2", w], ["y1", 7], ["y2", 7], ["stroke", "#8c959f"], ["stroke-width", 0.5]])
      mid.setAttribute(k, String(v));
    svg.appendChild(mid);
    if (!a) return svg;
    const top = Math.max(1e-9, ...a.filter((x) => x !== null).map(Math.abs));
    a.forEach((x, k) => {
      if (x === null || x === 0) return;
      const h = (6 * Math.abs(x)) / top;
      const bar = document.createElementNS(NS, "rect");
      for (const [name, v] of [["x", 1 + 4 * k], ["width", 3], ["y", x > 0 ? 7 - h : 7], ["height", h],
                               ["fill", x > 0 ? "#1a7f37" : "#cf222e"]]) bar.setAttribute(name, String(v));
      svg.appendChild(bar);
    });
    return svg;
  }
  function groupLabel(i) {
    const j = job(i);
    return `${j.arm}${j.seed !== null ? ` · seed ${j.seed}` : ""}`;
  }
  function row(i) {
    const li = el("li", { "data-key": keys[i] });
    const where = G.src[i] ? `held-out, step ${G.step[i]}` : `step ${G.step[i]}${G.round[i] ? `, round ${G.round[i]}` : ""}`;
    li.appendChild(el("div", {}, el("div", { class: "meta" }, `${groupLabel(i)} · ${where} · difficulty ${G.difficulty[i]}`),
      dots(i), " ", advantageBars(i)));
    const flags = el("div", { class: "meta" }, el("span", { class: `badge ${G.kind[i]}` }, KIND_NAMES[G.kind[i]]));
    if (cutOff(i) > 0) flags.appendChild(document.createTextNode(` ✂${cutOff(i)}`));
    if (G.text[i] >= 0) flags.appendChild(document.createTextNode(" ¶"));
    li.appendChild(flags);
    li.addEventListener("click", () => openGroup(i));
    if (keys[i] === openKey) li.classList.add("open");
    return li;
  }
  function renderList() {
    const f = current();
    shown = [];
    for (let i = 0; i < N; i++) if (matches(i, f)) shown.push(i);
    limit = PAGE;
    document.getElementById("count").textContent =
      `${shown.length.toLocaleString("en")} of ${N.toLocaleString("en")} groups match`;
    document.getElementById("count").dataset.count = String(shown.length);
    drawRows();
  }
  function drawRows() {
    list.replaceChildren();
    for (const i of shown.slice(0, limit)) list.appendChild(row(i));
    if (shown.length > limit) {
      const more = el("li", { class: "more" }, `show ${Math.min(PAGE, shown.length - limit)} more of ${shown.length - limit}`);
      more.addEventListener("click", () => { limit += PAGE; drawRows(); });
      list.appendChild(more);
    }
  }

  // ---- the detail pane ----
  function link(i, text) {
    const a = el("a", { class: "group", "data-key": keys[i] }, text);
    a.addEventListener("click", () => openGroup(i));
    return a;
  }
  function openGroup(i) {
    openKey = keys[i];
    for (const li of list.querySelectorAll("li.open")) li.classList.remove("open");
    const li = list.querySelector(`li[data-key="${CSS.escape(openKey)}"]`);
    if (li) li.classList.add("open");
    renderDetail(i);
    writeHash();
  }
  function renderDetail(i) {
    const j = job(i);
    const t = G.text[i] >= 0 ? D.replies[G.text[i]] : null;
    const parts = [];
    parts.push(el("h2", {}, `${groupLabel(i)}, job ${j.name}`));
    const facts = [G.src[i] ? `held-out prompt at the base evaluation (step ${G.step[i]})` : `step ${G.step[i]}`,
      `round ${G.round[i]}`, `prompt ${G.prompt[i]}`, `difficulty ${G.difficulty[i]}`, KIND_NAMES[G.kind[i]],
      G.src[i] ? "not trained" : G.used[i] ? "trained on" : "not trained on",
      G.tokens[i] >= 0 ? `${G.tokens[i]} tokens` : "tokens not counted"];
    parts.push(el("p", { class: "meta" }, facts.join(" · ")));
    parts.push(el("h2", {}, "Prompt"));
    parts.push(t && t.prompt !== null ? el("pre", { class: "prompt" }, t.prompt)
      : el("p", { class: "note" }, "The prompt's text was not kept for this group (only its id, above)."));
    parts.push(el("p", {}, "Reference answer: ", t && t.gold !== null ? el("code", {}, t.gold) : el("span", { class: "note" }, "not recorded")));
    parts.push(el("h2", {}, "Replies"));
    const table = el("table", {}, el("tr", {}, ...["#", "reward", "advantage", "answer read", "tokens", "cut off", "reply"]
      .map((h) => el("th", {}, h))));
    const r = G.rewards[i], a = G.advantages[i];
    for (let k = 0; k < r.length; k++) {
      const sample = t ? t.samples[k] : null;
      table.appendChild(el("tr", { "data-sample": String(k) },
        el("td", { class: "num" }, String(k + 1)),
        el("td", { class: "num" }, el("span", { class: `dot ${G.correct[i] && G.correct[i][k] ? "c" : r[k] > 0 ? "p" : "w"}` }), " ", fmt(r[k], 3)),
        el("td", { class: "num" }, a ? fmt(a[k], 3) : "–"),
        el("td", {}, sample ? (sample.answer === null ? (sample.answered === false ? "none read" : "–") : sample.answer) : "–"),
        el("td", { class: "num" }, sample && sample.tokens !== null ? String(sample.tokens) : "–"),
        el("td", {}, sample && sample.truncated !== null ? (sample.truncated ? "yes" : "no") : "–"),
        el("td", { class: "reply" }, sample ? sample.text : "")));
    }
    parts.push(table);
    if (!t) parts.push(el("p", { class: "note" }, "Replies were not kept for this group: a run keeps the first step's " +
      "group of each difficulty, log_completions=N replies a step, and a few of the base evaluation's."));
    else if (t.samples.length < r.length) parts.push(el("p", { class: "note" }, `${t.samples.length} of ${r.length} replies were kept (log_completions).`));
    if (a === null && !G.src[i]) parts.push(el("p", { class: "note" }, "Advantages were not recorded by this run's version."));

    const rounds = units.get(`${G.job[i]}/${G.step[i]}/${G.prompt[i]}/${G.src[i]}`).filter((x) => x !== i);
    if (rounds.length) {
      parts.push(el("h2", {}, "The other rounds of this prompt at this step"));
      const rt = el("table", {}, el("tr", {}, ...["round", "rewards", "tie"].map((h) => el("th", {}, h))));
      for (const x of rounds) rt.appendChild(el("tr", {}, el("td", {}, link(x, `round ${G.round[x]}`)), el("td", {}, dots(x)), el("td", {}, KIND_NAMES[G.kind[x]])));
      parts.push(rt);
    }
    const same = across.get(`${G.step[i]}/${G.prompt[i]}/${G.src[i]}`).filter((x) => G.job[x] !== G.job[i] || x === i);
    if (same.length > 1) {
      parts.push(el("h2", {}, "The same prompt at the same step in every job"));
      const byArm = new Map();
      for (const x of same) {
        const arm = job(x).arm;
        if (!byArm.has(arm)) byArm.set(arm, []);
        byArm.get(arm).push(x);
      }
      // one row an arm: its jobs' groups of this prompt side by side (seeds, then rounds)
      const grid = el("table", { class: "across" }, el("tr", {}, el("th", {}, "arm"), el("th", {}, "groups")));
      for (const [arm, xs] of byArm) {
        const cell = el("td", {});
        for (const x of xs) {
          const label = `${job(x).seed !== null ? `seed ${job(x).seed}` : job(x).name}${G.round[x] ? `, round ${G.round[x]}` : ""}`;
          cell.appendChild(el("span", { class: `pick${x === i ? " here" : ""}` }, link(x, label), " ", dots(x)));
        }
        grid.appendChild(el("tr", {}, el("th", {}, arm), cell));
      }
      parts.push(grid);
    }
    detail.replaceChildren(...parts);
  }

  // ---- the heatmaps ----
  function heatColor(rate) {
    const v = Math.round(255 - 200 * rate);
    return `rgb(${v}, ${v}, ${Math.round(255 - 120 * rate)})`;
  }
  function cellHash(arm, diff, bin) {
    const params = new URLSearchParams({ arm, diff, from: String(bin[0]), to: String(bin[1]), src: "0" });
    return `#${params.toString()}`;
  }
  function renderHeat() {
    const box = document.getElementById("heat-view");
    const H = D.heat;
    const parts = [el("p", { class: "note" }, "Each cell: the share of first-round groups that tied, over every group of " +
      "the run (not only those on this page), by step bin and difficulty. A cell opens its groups on this page.")];
    parts.push(el("div", { class: "legend" }, "0%", ...[0, 0.25, 0.5, 0.75, 1].map((r) => {
      const c = el("span", { class: "dot" }); c.style.background = heatColor(r); c.style.width = "18px"; return c;
    }), "100% tied"));
    for (const arm of D.arms) {
      const grid = H.arms[arm];
      if (!grid) continue;
      const table = el("table", { class: "heat", "data-arm": arm });
      table.appendChild(el("caption", { style: "text-align:left" }, el("strong", {}, arm)));
      table.appendChild(el("tr", {}, el("th", {}, "difficulty \\ steps"), ...H.bins.map((b) => el("th", { class: "bin" }, b[0] === b[1] ? `${b[0]}` : `${b[0]}–${b[1]}`))));
      H.difficulties.forEach((d, r) => {
        const tr = el("tr", {}, el("th", {}, d));
        grid[r].forEach((cell, c) => {
          const td = el("td", { class: "cell" });
          if (cell) {
            const [n, ties, right, wrong] = cell;
            td.style.background = heatColor(ties / n);
            if (ties / n > 0.6) td.style.color = "#fff";
            const a = el("a", { href: cellHash(arm, d, H.bins[c]), title:
              `${arm}, difficulty ${d}, steps ${H.bins[c][0]}–${H.bins[c][1]}: ${n} groups, ${ties} tied ` +
              `(${right} all correct, ${wrong} all wrong)` }, String(Math.round((100 * ties) / n)));
            td.appendChild(a);
          }
          tr.appendChild(td);
        });
        table.appendChild(tr);
      });
      parts.push(table);
    }
    box.replaceChildren(...parts);
  }

  // ---- wiring ----
  function showView(name) {
    view = name;
    document.getElementById("groups-view").hidden = name !== "groups";
    document.getElementById("heat-view").hidden = name !== "heat";
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("on", b.dataset.view === name);
  }
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => { showView(b.dataset.view); writeHash(); });
  form.addEventListener("input", () => { renderList(); writeHash(); });
  form.addEventListener("submit", (e) => e.preventDefault());
  form.addEventListener("reset", () => setTimeout(() => { renderList(); writeHash(); }, 0));
  function fromHash() {
    readHash();
    showView(view);
    renderList();
    const i = byKey.get(openKey);
    if (i !== undefined) renderDetail(i);
    else openKey = "";
  }
  window.addEventListener("hashchange", () => { fromHash(); if (location.hash.includes("diff=")) showView("groups"); writeHash(); });
  renderHeat();
  fromHash();
  document.body.dataset.ready = "1";
})();
