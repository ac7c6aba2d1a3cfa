// The explorer page: models as editable model descriptions, each evaluated by the C++ cost
// model compiled to WebAssembly (engine.js, explore/page_request.h), drawn by charts.js, with
// every text from labels.js. This file holds the page's state and controls; no cost formula.
"use strict";

const DATA = JSON.parse(document.getElementById("wren-data").textContent);
const CURVE = Array.from({ length: 11 }, (_, i) => 1024 * 2 ** i);  // 1K .. 1M
const DEFAULT_KNOBS = { weights: "bf16", head: "", kv: "bf16", engram: "", firing: 1, v_read: 1, bandwidth: 50,
                        engram_storage: false };
const PRECISIONS = ["f32", "bf16", "f16", "int8", "int8:g128", "int4", "int4:g64", "int4:g128"];
// Slider ranges per field; a value beyond a range widens it (a typed value is never clipped).
const RANGES = {
  d_model: [64, 8192, 64], vocab_size: [256, 262144, 256], context_length: [256, 1048576, 256],
  n_heads: [1, 128, 1], n_kv_heads: [1, 128, 1], head_dim: [8, 512, 8], window: [0, 16384, 64],
  q_lora_rank: [0, 4096, 32], kv_lora_rank: [0, 2048, 16], qk_nope_dim: [0, 512, 8], qk_rope_dim: [0, 256, 8],
  v_head_dim: [0, 512, 8], n_v_heads: [0, 128, 1], top_k: [1, 8192, 1], recent: [0, 4096, 16], conv_kernel: [1, 64, 1],
  state_dim: [1, 1024, 1],
  hidden: [64, 65536, 64], n_experts: [1, 512, 1], expert_hidden: [16, 16384, 16], n_shared: [0, 8, 1],
  shared_hidden: [0, 16384, 16], latent_dim: [0, 8192, 32], repeat: [1, 128, 1], n_layers: [1, 256, 1],
  rows: [2, 4000000, 1], heads_per_order: [1, 32, 1], row_dim: [1, 1024, 1], streams: [1, 16, 1], block_size: [1, 32, 1],
  firing: [0, 1, 0.01], v_read: [0, 1, 0.01], bandwidth: [1, 4000, 1],
};
const MIXER_FIELDS = {
  attention: ["n_heads", "n_kv_heads", "head_dim", "window"],
  relu2_attention: ["n_heads", "n_kv_heads", "head_dim"],
  sparse_reuse: ["n_heads", "head_dim", "top_k", "recent"],
  mla: ["n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim"],
  gdn: ["n_heads", "head_dim", "n_v_heads", "v_head_dim"],
  gdn2: ["n_heads", "head_dim", "n_v_heads", "v_head_dim"],
  short_conv: ["conv_kernel"],
  mamba2: ["n_heads", "head_dim", "n_kv_heads", "state_dim", "conv_kernel"],
};
const FFN_FIELDS = { dense: ["hidden"], moe: ["n_experts", "top_k", "expert_hidden", "n_shared", "shared_hidden", "latent_dim"] };
const TOTALS = [  // [label, section, metric, at context n?]: rows of the cost model's report
  ["layers_total", "shape", "layers", false], ["total_params", "parameters", "total", false],
  ["active_params", "active parameters", "excl. input embedding", false],
  ["active_incl", "active parameters", "incl. input embedding (stored - engram - unused experts)", false],
  ["flops_train", "FLOPs per token: training", "total", true], ["flops_prefill", "FLOPs per token: prefill", "total", true],
  ["flops_decode", "FLOPs per token: decode", "total", true], ["state_bytes", "state stored per sequence", "total bytes", true],
  ["decode_bytes", "bytes read per decode token", "memory total", true], ["tokens_s", "bytes read per decode token", "tokens/s ceiling", true],
  ["exit_layer", "shape", "prefill exit layer", false], ["cache_growth", "shape", "cache growth per token (bytes)", false],
];

let lang = "en", phase = "training", engine = null, nextUid = 1;
const models = (window.wrenModels = []);  // exposed for the browser test
const t = key => LABEL_TABLE[key]?.[LANGUAGES.indexOf(lang)] ?? key;

// ---- Model descriptions ------------------------------------------------------------------

// Consecutive identical layers become one group with "repeat", as the presets write them.
function groupLayers(layers) {
  const out = [];
  for (const l of layers) {
    const { repeat = 1, ...base } = l;
    const last = out[out.length - 1];
    if (last && JSON.stringify({ ...last, repeat: undefined }) === JSON.stringify({ ...base, repeat: undefined })) last.repeat += repeat;
    else out.push({ ...base, repeat });
  }
  return out;
}

function addModel(config, knobs = DEFAULT_KNOBS, context = 16384) {
  const json = structuredClone(config);
  json.layers = groupLayers(json.layers);
  const m = { uid: nextUid++, json, knobs: { ...knobs }, context, answer: null };
  models.push(m);
  evaluate(m);
  return m;
}

function evaluate(m) {
  const request = JSON.stringify({ model: m.json, knobs: m.knobs, context: m.context, curve: CURVE });
  m.answer = JSON.parse(engine.ccall("wren_answer", "string", ["string"], [request]));
}

// Layer references (K/V sources, engram layers) past a group move with it when it grows or shrinks.
function resizeGroup(json, g, count) {
  const starts = [];
  let at = 0;
  for (const l of json.layers) starts.push(at), at += l.repeat;
  const end = starts[g] + json.layers[g].repeat, delta = count - json.layers[g].repeat;
  json.layers[g].repeat = count;
  for (const l of json.layers.slice(g + 1))
    if (l.kv && typeof l.kv === "object")
      for (const k of Object.keys(l.kv)) if (l.kv[k] >= end) l.kv[k] += delta;
  if (json.engram?.layers) json.engram.layers = json.engram.layers.map(x => (x >= end ? x + delta : x));
}

function kvText(kv) {
  if (!kv || kv === "own") return "own";
  const [k, v] = Object.entries(kv)[0];
  return `${k} ${v}`;
}

function parseKv(text) {
  const s = text.trim();
  if (s === "own" || s === "") return undefined;
  const m = /^(reuse|bridge)\s+(\d+)$/.exec(s);
  return m ? { [m[1]]: Number(m[2]) } : s;  // anything else goes to the validator as it is
}

// ---- Controls ------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// A slider and a number field bound to one value; `set` receives the new number.
function numberControl(m, key, label, value, set, rebuild = false) {
  const [lo, hi0, step] = RANGES[key] ?? [0, Math.max(1, value * 4), 1];
  const hi = Math.max(hi0, value);
  const range = el("input", { type: "range", min: lo, max: hi, step, value, "data-knob": key });
  const field = el("input", { type: "number", step: "any", value, "data-knob": key, class: "field" });
  const onChange = source => () => {
    const v = Number(source.value);
    if (source === range) field.value = source.value;
    else if (v <= hi && v >= lo) range.value = source.value;
    update(m, () => set(v), rebuild);
  };
  range.addEventListener(rebuild ? "change" : "input", onChange(range));
  field.addEventListener("change", onChange(field));
  return el("label", { class: "knob" }, el("span", {}, label), range, field);
}

function selectControl(m, key, label, value, options, set, rebuild = false) {
  const s = el("select", { "data-knob": key }, ...options.map(([v, text]) => {
    const o = el("option", { value: v }, text);
    if (v === value) o.selected = true;
    return o;
  }));
  s.addEventListener("change", () => update(m, () => set(s.value), rebuild));
  return el("label", { class: "knob" }, el("span", {}, label), s);
}

function textControl(m, key, label, value, set, list) {
  const i = el("input", { type: "text", value, "data-knob": key, class: "text", ...(list ? { list } : {}) });
  i.addEventListener("change", () => update(m, () => set(i.value)));
  return el("label", { class: "knob" }, el("span", {}, label), i);
}

function checkControl(m, key, label, value, set) {
  const c = el("input", { type: "checkbox", "data-knob": key });
  c.checked = value;
  c.addEventListener("change", () => update(m, () => set(c.checked)));
  return el("label", { class: "knob" }, el("span", {}, label), c);
}

function group(title, ...controls) {
  const d = el("details", { open: "" }, el("summary", {}, title));
  controls.flat().forEach(c => d.append(c));
  return d;
}

function modelControls(m) {
  const j = m.json;
  const num = (obj, key, label = t(key)) => numberControl(m, key, label, obj[key] ?? 0, v => (obj[key] = v));
  const total = j.layers.reduce((s, l) => s + l.repeat, 0);
  const layers = numberControl(m, "n_layers", t("n_layers"), total, v => {
    // The longest group absorbs the change (the others keep their place in the schedule).
    const g = j.layers.reduce((best, l, i) => (l.repeat > j.layers[best].repeat ? i : best), 0);
    resizeGroup(j, g, Math.max(1, j.layers[g].repeat + v - j.layers.reduce((s, l) => s + l.repeat, 0)));
  }, true);
  const out = [group(t("g_model"), num(j, "d_model"), num(j, "vocab_size"), num(j, "context_length"), layers,
                     checkControl(m, "tie_embeddings", t("tie_embeddings"), !!j.tie_embeddings, v => (j.tie_embeddings = v)))];
  const mixers = Object.entries(j.mixers).map(([name, mx]) => {
    const kinds = Object.keys(MIXER_FIELDS).map(k => [k, t(k)]);
    return el("div", { class: "sub", "data-mixer": name }, el("b", {}, name),
              selectControl(m, "kind", t("kind"), mx.kind, kinds, v => { mx.kind = v; if (v === "mamba2") mx.state_dim ??= 128; }, true),
              ...MIXER_FIELDS[mx.kind].map(f => num(mx, f)));
  });
  out.push(group(t("g_mixers"), mixers));
  out.push(group(t("g_ffns"), Object.entries(j.ffns).map(([name, f]) =>
    el("div", { class: "sub", "data-ffn": name }, el("b", {}, name), ...FFN_FIELDS[f.kind].map(k => num(f, k))))));
  const mixerNames = Object.keys(j.mixers).map(n => [n, n]), ffnNames = Object.keys(j.ffns).map(n => [n, n]);
  out.push(group(t("g_layers"), j.layers.map((l, g) =>
    el("div", { class: "sub row", "data-group": g },
       selectControl(m, "mixer", t("mixer"), l.mixer, mixerNames, v => (l.mixer = v)),
       selectControl(m, "ffn", t("ffn"), l.ffn, ffnNames, v => (l.ffn = v)),
       textControl(m, "kv", t("kv"), kvText(l.kv), v => { const kv = parseKv(v); if (kv === undefined) delete l.kv; else l.kv = kv; }),
       numberControl(m, "repeat", t("repeat"), l.repeat, v => resizeGroup(j, g, v))))));
  if (j.engram)
    out.push(group(t("g_engram"), num(j.engram, "rows"), num(j.engram, "heads_per_order"), num(j.engram, "row_dim"),
                   textControl(m, "orders", t("orders"), j.engram.orders.join(","),
                               v => (j.engram.orders = v.split(",").map(x => Number(x.trim()))))));
  const r = (j.residual ??= { kind: "plain" });
  out.push(group(t("g_residual"),
    selectControl(m, "residual_kind", t("residual_kind"), r.kind, ["plain", "attn_residuals", "mhc"].map(k => [k, k]),
                  v => (r.kind = v), true),
    r.kind === "mhc" ? num(r, "streams") : [], r.kind === "attn_residuals" ? num(r, "block_size") : []));
  const k = m.knobs;
  const precision = (key, label, allowEmpty) =>
    textControl(m, key, label, k[key.replace("_precision", "")], v => (k[key.replace("_precision", "")] = v.trim()), "precisions");
  out.push(group(t("g_decode"),
    precision("weights", t("weights")), precision("head", t("head") + " (" + t("same_as_weights") + ": \"\")"),
    precision("kv_precision", t("kv_precision")), precision("engram_precision", t("engram_precision") + " (" + t("same_as_weights") + ": \"\")"),
    numberControl(m, "firing", t("firing"), k.firing, v => (k.firing = v)),
    numberControl(m, "v_read", t("v_read"), k.v_read, v => (k.v_read = v)),
    checkControl(m, "engram_storage", t("engram_storage"), k.engram_storage, v => (k.engram_storage = v)),
    numberControl(m, "bandwidth", t("bandwidth"), k.bandwidth, v => (k.bandwidth = v)),
    contextControl(m)));
  return out;
}

// Context: a slider over powers of two (1K .. 1M) and a field for any length.
function contextControl(m) {
  const range = el("input", { type: "range", min: 10, max: 20, step: 1, value: Math.round(Math.log2(m.context)), "data-knob": "context" });
  const field = el("input", { type: "number", value: m.context, "data-knob": "context", class: "field" });
  range.addEventListener("input", () => { field.value = 2 ** Number(range.value); update(m, () => (m.context = 2 ** Number(range.value))); });
  field.addEventListener("change", () => update(m, () => (m.context = Math.round(Number(field.value)))));
  return el("label", { class: "knob" }, el("span", {}, t("context")), range, field);
}

// ---- Rendering -------------------------------------------------------------------------------

const timings = (window.wrenTimings = []);

// One change: apply it, evaluate the model, redraw its figures (its controls too if asked).
function update(m, change, rebuild = false) {
  const t0 = performance.now();
  change();
  evaluate(m);
  if (rebuild) renderModels();
  else renderCard(m);
  renderCharts();
  timings.push(performance.now() - t0);
}

function valueAt(m, section, metric, atContext) {
  const v = m.answer.report?.[section]?.[metric];
  return atContext ? v?.[m.answer.context_key] : v;
}

function renderCard(m) {
  const card = document.querySelector(`.model[data-uid="${m.uid}"]`);
  const error = card.querySelector(".error"), body = card.querySelector(".totals tbody");
  error.textContent = m.answer.ok ? "" : `${t("invalid")}: ${m.answer.error}`;
  body.replaceChildren();
  if (!m.answer.ok) return;
  for (const [label, section, metric, at] of TOTALS) {
    const v = valueAt(m, section, metric, at);
    if (v === undefined) continue;
    body.append(el("tr", { dataset: { section, metric, context: at ? m.answer.context_key : "", exact: String(v) } },
                   el("td", {}, t(label) + (at ? ` (n = ${m.answer.context_key})` : "")),
                   el("td", { class: "num", "data-tip": `${t(label)}: ${exact(v)}` }, human(v))));
  }
  renderFormulas(m, card.querySelector(".formulas"));
}

function renderFormulas(m, box) {
  box.replaceChildren(el("summary", {}, t("formulas")));
  for (const f of m.answer.formulas) {
    const same = f.closed_value === f.model_value;
    box.append(el("div", { class: "formula", "data-id": f.id },
      el("div", {}, el("b", {}, `${f.id} `), t("f_" + f.id)),
      el("code", {}, `${f.id} = ${f.closed_form}`), el("br"),
      el("code", {}, `= ${f.substituted} = ${exact(f.closed_value)}`),
      el("div", { class: same ? "same" : "differs" },
         `${t("cost_model")}: ${exact(f.model_value)}` + (same ? " ✓" : ` (${t("differs")})`))));
  }
}

function renderModels() {
  const row = document.getElementById("models");
  const open = new Set([...row.querySelectorAll("details")].filter(d => !d.open).map(d => d.dataset.key));
  row.replaceChildren();
  for (const m of models) {
    const name = el("input", { type: "text", class: "name", value: m.json.name ?? "", "data-knob": "name" });
    name.addEventListener("change", () => update(m, () => (m.json.name = name.value), false));
    const download = el("button", { class: "download", onclick: () => downloadModel(m) }, t("download"));
    const remove = el("button", { class: "remove", onclick: () => { models.splice(models.indexOf(m), 1); renderAll(); } }, t("remove"));
    const card = el("div", { class: "model", "data-uid": m.uid },
      el("div", { class: "head" }, name, download, remove), el("div", { class: "error" }),
      el("table", { class: "totals" }, el("caption", {}, t("totals")), el("tbody")),
      ...modelControls(m), el("details", { class: "formulas" }));
    row.append(card);
    renderCard(m);
  }
  renderAddMenu();
}

function downloadModel(m) {
  const blob = new Blob([JSON.stringify(m.json, null, 2) + "\n"], { type: "application/json" });
  const a = el("a", { href: URL.createObjectURL(blob), download: `${m.json.name || "model"}.json` });
  document.body.append(a);
  a.click();
  a.remove();
}

function renderAddMenu() {
  const s = document.getElementById("add-source");
  s.replaceChildren(
    el("optgroup", { label: t("preset") }, ...Object.keys(DATA.presets).map(n => el("option", { value: "preset:" + n }, n))),
    el("optgroup", { label: t("copy_of") }, ...models.map(m => el("option", { value: "copy:" + m.uid }, `${t("copy_of")} ${m.json.name}`))));
}

function addFromMenu() {
  const [how, what] = document.getElementById("add-source").value.split(/:(.*)/s);
  if (how === "preset") addModel(DATA.presets[what]);
  else {
    const src = models.find(m => String(m.uid) === what);
    const copy = addModel(src.json, src.knobs, src.context);
    copy.json.name = `${src.json.name}-2`;
    evaluate(copy);
  }
  renderAll();
}

// The report's row names ("attention: mla", "weights: lm_head") in the page's language.
const rowLabel = k => {
  const [, group, item] = /^(attention|weights): (.*)$/.exec(k) ?? [];
  return group ? `${t(group === "attention" ? "attention_products" : "weights_of")} ${t(item)}` : t(k);
};

function componentParts(m, section, exclude, at) {
  return Object.entries(m.answer.report[section] ?? {})
    .filter(([k]) => !exclude(k))
    .map(([k, v]) => [k, at ? v[m.answer.context_key] : v]);
}

function renderCharts() {
  const valid = models.filter(m => m.answer.ok);
  const box = document.getElementById("charts");
  box.replaceChildren();
  const bars = (title, partsOf) => {
    const perModel = valid.map(m => ({ name: m.json.name, parts: partsOf(m).map(([k, v]) => ({
      label: rowLabel(k), value: v, tip: `${m.json.name} · ${rowLabel(k)}: ${exact(v)}` })) }));
    const labels = [...new Set(perModel.flatMap(b => b.parts.map(p => p.label)))];
    return stackedBars(title, perModel, labels);
  };
  const isConvention = k => /^(incl\.|excl\.|looked up|total)/.test(k);
  box.append(bars(t("c_total"), m => componentParts(m, "parameters", k => k === "total")));
  box.append(bars(t("c_active"), m => componentParts(m, "active parameters", isConvention)));
  const flops = "FLOPs per token: " + phase;
  const lines = (title, section, metric, breakdown) => lineChart(title, t("context_axis"), valid.map(m => ({
    name: m.json.name,
    points: m.answer.curve_keys.map(({ n, key }) => {
      const v = m.answer.report[section][metric][key];
      const parts = breakdown(m).map(([s, k]) => `${rowLabel(k)}: ${exact(m.answer.report[s][k][key])}`);
      return { x: n, y: v, key, tip: `${m.json.name} · n = ${key}: ${exact(v)}\n${parts.join("\n")}` };
    }),
  })));
  const rowsOf = (section, skip) => m => Object.keys(m.answer.report[section]).filter(k => !skip(k)).map(k => [section, k]);
  box.append(lines(`${t("c_flops")} (${t(phase)})`, flops, "total", rowsOf(flops, k => k === "total")));
  box.append(bars(`${t("c_flops_at")} (${t(phase)})`, m => componentParts(m, flops, k => k === "total", true)));
  box.append(lines(t("c_state"), "state stored per sequence", "total bytes", rowsOf("state stored per sequence", k => k === "total bytes")));
  box.append(lines(t("c_read"), "bytes read per decode token", "memory total",
                   rowsOf("bytes read per decode token", k => k === "memory total" || k === "tokens/s ceiling")));
  box.append(bars(t("c_tps"), m => [["tokens_s", valueAt(m, "bytes read per decode token", "tokens/s ceiling", true)]]));
}

function renderStatic() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  document.getElementById("title").textContent = t("title");
  document.getElementById("subtitle").textContent = t("subtitle");
  document.getElementById("lang-label").textContent = t("language");
  document.getElementById("add-label").textContent = t("add_from");
  document.getElementById("add").textContent = t("add");
  document.getElementById("phase-label").textContent = t("phase");
  document.getElementById("charts-title").textContent = t("charts");
  for (const o of document.querySelectorAll("#phase option")) o.textContent = t(o.value);
}

function renderAll() {
  renderStatic();
  renderModels();
  renderCharts();
}

function setupTooltip() {
  const tip = document.getElementById("tip");
  document.addEventListener("mouseover", e => {
    const s = e.target.closest?.("[data-tip]");
    if (!s) return (tip.style.display = "none");
    tip.textContent = s.dataset.tip;
    tip.style.display = "block";
  });
  document.addEventListener("mousemove", e => {
    tip.style.left = e.pageX + 14 + "px";
    tip.style.top = e.pageY + 10 + "px";
  });
}

async function main() {
  performance.mark("scripts");
  engine = await WrenEngine();
  performance.mark("engine");
  document.getElementById("precisions").append(...PRECISIONS.map(p => el("option", { value: p })));
  document.getElementById("lang").addEventListener("change", e => { lang = e.target.value; renderAll(); });
  document.getElementById("phase").addEventListener("change", e => { phase = e.target.value; renderCharts(); });
  document.getElementById("add").addEventListener("click", addFromMenu);
  setupTooltip();
  for (const c of DATA.open) addModel(c);
  performance.mark("evaluated");
  renderAll();
  window.wrenReady = performance.now();
}

main();
