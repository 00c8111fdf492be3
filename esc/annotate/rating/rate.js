// The rating pages of `esc annotate site` (esc/annotate/rating_site.py): one dialogue at a time,
// blind, rated on the 7 dimensions 0-4; kept in localStorage per rater; exported as JSONL.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const dims = data.dimensions;
  let rater = null, order = [], orderSeed = 0, state = null, at = 0, focus = 0;
  const drafts = {}, comments = {};  // unsaved scores and comments by task key

  // FNV-1a, then mulberry32: the same order for the same rater on every machine
  function hash32(text) {
    let h = 0x811c9dc5;
    for (const ch of new TextEncoder().encode(text)) { h ^= ch; h = Math.imul(h, 0x01000193) >>> 0; }
    return h >>> 0;
  }
  function mulberry32(seed) {
    return function () {
      seed = (seed + 0x6D2B79F5) >>> 0;
      let t = seed;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  function shuffled(n, seed) {
    const idx = Array.from({ length: n }, (_, i) => i), rand = mulberry32(seed);
    for (let i = n - 1; i > 0; i--) { const j = Math.floor(rand() * (i + 1)); [idx[i], idx[j]] = [idx[j], idx[i]]; }
    return idx;
  }

  const storeKey = () => `esc-rating:${data.tasks_sha256}:${rater}`;
  function load() {
    try { return JSON.parse(localStorage.getItem(storeKey())) || { ratings: {}, at: 0 }; }
    catch (e) { return { ratings: {}, at: 0 }; }
  }
  function persist() { state.at = at; localStorage.setItem(storeKey(), JSON.stringify(state)); }

  function start() {
    const given = $("rater").value.trim();
    if (!given) { $("rater").focus(); return; }
    rater = given;
    localStorage.setItem("esc-rating:last-rater", rater);
    orderSeed = hash32(`${data.seed}:${rater}`);
    order = shuffled(data.items.length, orderSeed);
    state = load();
    at = Math.min(state.at || 0, order.length - 1);
    $("who").hidden = true; $("bar").hidden = false; $("work").hidden = false;
    render();
  }

  const item = () => data.items[order[at]];
  function counts() {
    let rated = 0, skipped = 0;
    for (const r of Object.values(state.ratings)) { if (r.skipped) skipped++; else rated++; }
    return { rated, skipped };
  }

  function render() {
    const it = item(), rub = data.rubrics[it.language] || data.rubrics.en;
    const [seeker, helper] = data.speakers[it.language] || data.speakers.en;
    document.documentElement.lang = it.language === "zh" ? "zh-Hans" : "en";
    const c = counts();
    $("progress").textContent = `${c.rated} rated, ${c.skipped} skipped, of ${data.items.length} (rater ${rater})`;
    $("position").textContent = `${at + 1} of ${order.length}`;
    $("card").textContent = it.card || "(the card is not in the card files given)";
    const box = $("dialogue");
    box.replaceChildren();
    for (const [role, text] of it.lines) {
      const div = document.createElement("div"), who = document.createElement("span");
      div.className = `turn ${role === "user" ? "user" : "assistant"}`;
      who.className = "who"; who.textContent = role === "user" ? seeker : helper;
      div.append(who, document.createTextNode(text));
      box.append(div);
    }
    const saved = state.ratings[it.key];
    const scores = drafts[it.key] || (saved && saved.scores ? { ...saved.scores } : {});
    drafts[it.key] = scores;
    const holder = $("dimensions");
    holder.replaceChildren();
    dims.forEach((dim, d) => {
      const rule = rub[dim], wrap = document.createElement("div");
      wrap.className = "dim" + (d === focus ? " focus" : ""); wrap.dataset.dim = dim;
      const h = document.createElement("h3"); h.textContent = rule.title;
      const p = document.createElement("p"); p.className = "focus-text"; p.textContent = rule.focus;
      wrap.append(h, p);
      rule.levels.forEach((anchor, s) => {
        const label = document.createElement("label"), input = document.createElement("input"), b = document.createElement("b");
        input.type = "radio"; input.name = `score-${dim}`; input.value = String(s); input.checked = scores[dim] === s;
        input.addEventListener("change", () => { scores[dim] = s; focus = d; render(); });
        b.textContent = String(s);
        label.append(input, b, document.createTextNode(anchor));
        wrap.append(label);
      });
      holder.append(wrap);
    });
    $("comment").value = it.key in comments ? comments[it.key] : (saved && saved.comment) || "";
    $("status").textContent = saved ? (saved.skipped ? "Skipped." : "Saved.") : "";
    $("source-note").textContent = it.language === "zh" ? data.rubrics.zh_source : "";
  }

  function move(to) {
    at = Math.max(0, Math.min(order.length - 1, to)); focus = 0;
    $("done").hidden = true; $("work").hidden = false;
    persist(); render();
  }
  function nextOpen() {  // the next dialogue neither rated nor skipped, after this one
    for (let k = 1; k <= order.length; k++) {
      const i = (at + k) % order.length;
      if (!state.ratings[data.items[order[i]].key]) return i;
    }
    return -1;
  }
  function advance() {
    const i = nextOpen();
    if (i < 0) { persist(); render(); $("work").hidden = true; $("done").hidden = false; return; }
    move(i);
  }
  function record(extra) {
    const it = item();
    state.ratings[it.key] = { comment: $("comment").value.trim(), rated_at: new Date().toISOString(), ...extra };
    delete comments[it.key];
  }
  function save() {
    const it = item(), scores = drafts[it.key] || {};
    const missing = dims.filter((d) => !(d in scores));
    if (missing.length) {
      $("status").textContent = `Score every dimension first (missing: ${missing.map((d) => (data.rubrics[it.language] || data.rubrics.en)[d].title).join(", ")}).`;
      focus = dims.indexOf(missing[0]); return;
    }
    record({ scores: { ...scores }, skipped: false });
    advance();
  }
  function skip() { record({ scores: null, skipped: true }); advance(); }

  function exportRatings() {
    const lines = [];
    order.forEach((index, position) => {
      const key = data.items[index].key, r = state.ratings[key];
      if (!r) return;
      lines.push(JSON.stringify({
        format: data.format, rater, task: key, scores: r.skipped ? null : r.scores, comment: r.comment,
        skipped: !!r.skipped, rated_at: r.rated_at, tasks_sha256: data.tasks_sha256,
        order_seed: orderSeed, position: position + 1,
      }));
    });
    const blob = new Blob([lines.map((l) => l + "\n").join("")], { type: "application/x-ndjson" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = `ratings-${rater.replace(/[^A-Za-z0-9_.-]+/g, "_")}.jsonl`;
    document.body.append(a); a.click(); a.remove();
    $("status").textContent = `Exported ${lines.length} records.`;
  }

  $("start").addEventListener("click", start);
  $("rater").addEventListener("keydown", (e) => { if (e.key === "Enter") start(); });
  $("rater").value = localStorage.getItem("esc-rating:last-rater") || "";
  $("prev").addEventListener("click", () => move(at - 1));
  $("skip").addEventListener("click", skip);
  $("save").addEventListener("click", save);
  $("export").addEventListener("click", exportRatings);
  $("switch").addEventListener("click", () => { persist(); location.reload(); });
  $("comment").addEventListener("input", () => { comments[item().key] = $("comment").value; });
  document.addEventListener("keydown", (e) => {
    if (!rater || e.target.tagName === "INPUT" && e.target.type !== "radio" || e.target.tagName === "TEXTAREA") return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if ($("work").hidden && e.key !== "ArrowLeft" && e.key !== "e") return;  // all done: back, or export
    const it = item();
    if (/^[0-4]$/.test(e.key)) {
      drafts[it.key][dims[focus]] = Number(e.key); focus = Math.min(focus + 1, dims.length - 1); render();
    } else if (e.key === "ArrowDown") { focus = Math.min(focus + 1, dims.length - 1); render(); }
    else if (e.key === "ArrowUp") { focus = Math.max(focus - 1, 0); render(); }
    else if (e.key === "Enter") { save(); }
    else if (e.key === "s") { skip(); }
    else if (e.key === "ArrowLeft") { move(at - 1); }
    else if (e.key === "ArrowRight") { move(at + 1); }
    else if (e.key === "e") { exportRatings(); }
    else return;
    e.preventDefault();
  });
})();
