// SVG charts drawn from the cost model's answers: stacked bars (one bar per model) and line
// charts on log axes (one line per model). Drawing only; every value comes from the engine.
// Each mark carries data-tip with its exact figure; the page shows it on hover.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#bab0ac", "#2f4b7c", "#a05195"];
const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function svgText(parent, x, y, text, attrs = {}) {
  const t = svgEl("text", { x, y, "font-size": 11, ...attrs }, parent);
  t.textContent = text;
  return t;
}

const CHART_W = 460, CHART_H = 240, M = { l: 62, r: 12, t: 24, b: 34 };

function niceLogTicks(lo, hi) {
  const ticks = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); ++e) ticks.push(10 ** e);
  return ticks;
}

// bars: [{name, parts: [{label, value, tip}]}]
function stackedBars(title, bars, stackLabels) {
  const svg = svgEl("svg", { width: CHART_W, height: CHART_H, class: "chart" });
  svgText(svg, M.l, 14, title, { "font-weight": "bold" });
  const totals = bars.map(b => b.parts.reduce((s, p) => s + p.value, 0));
  const max = Math.max(1, ...totals);
  const w = (CHART_W - M.l - M.r) / Math.max(1, bars.length);
  const y = v => CHART_H - M.b - (v / max) * (CHART_H - M.t - M.b);
  for (let i = 0; i <= 4; ++i) {
    const v = (max * i) / 4;
    svgEl("line", { x1: M.l, x2: CHART_W - M.r, y1: y(v), y2: y(v), stroke: "#ddd" }, svg);
    svgText(svg, M.l - 4, y(v) + 4, human(v), { "text-anchor": "end" });
  }
  bars.forEach((b, i) => {
    let base = 0;
    b.parts.forEach(p => {
      const k = stackLabels.indexOf(p.label);
      const r = svgEl("rect", { x: M.l + i * w + w * 0.15, width: w * 0.7, y: y(base + p.value),
                                height: Math.max(0, y(base) - y(base + p.value)), fill: PALETTE[k % PALETTE.length] }, svg);
      r.dataset.tip = p.tip;
      base += p.value;
    });
    const fit = Math.max(3, Math.floor(w / 6.2));  // characters that fit under a bar
    const label = svgText(svg, M.l + i * w + w / 2, CHART_H - M.b + 14, b.name.length > fit ? b.name.slice(0, fit - 1) + "…" : b.name,
                          { "text-anchor": "middle" });
    label.dataset.tip = b.name;
  });
  legend(svg, stackLabels.map((l, k) => [l, PALETTE[k % PALETTE.length]]));
  return svg;
}

// series: [{name, points: [{x, y, key, tip}]}]
function lineChart(title, xLabel, series) {
  const svg = svgEl("svg", { width: CHART_W, height: CHART_H, class: "chart" });
  svgText(svg, M.l, 14, title, { "font-weight": "bold" });
  const xs = series.flatMap(s => s.points.map(p => p.x)), ys = series.flatMap(s => s.points.map(p => p.y)).filter(v => v > 0);
  if (!xs.length || !ys.length) return svg;
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y0 === y1) y0 /= 2, y1 *= 2;
  const ly0 = Math.log10(y0), ly1 = Math.log10(y1), lx0 = Math.log2(x0), lx1 = Math.log2(Math.max(x1, x0 * 2));
  const X = v => M.l + ((Math.log2(v) - lx0) / (lx1 - lx0)) * (CHART_W - M.l - M.r);
  const Y = v => CHART_H - M.b - ((Math.log10(Math.max(v, y0)) - ly0) / (ly1 - ly0 || 1)) * (CHART_H - M.t - M.b);
  for (const t of niceLogTicks(y0, y1)) {
    if (t < y0 / 1.0001 || t > y1 * 1.0001) continue;
    svgEl("line", { x1: M.l, x2: CHART_W - M.r, y1: Y(t), y2: Y(t), stroke: "#ddd" }, svg);
    svgText(svg, M.l - 4, Y(t) + 4, human(t), { "text-anchor": "end" });
  }
  for (const p of series[0].points)  // the engine's own context keys ("16K"), every other power of 2
    if (Number.isInteger(Math.log2(p.x)) && Math.log2(p.x) % 2 === 0)
      svgText(svg, X(p.x), CHART_H - M.b + 14, p.key, { "text-anchor": "middle" });
  svgText(svg, (M.l + CHART_W - M.r) / 2, CHART_H - M.b + 26, xLabel, { "text-anchor": "middle", fill: "#555" });
  series.forEach((s, k) => {
    const color = PALETTE[k % PALETTE.length];
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join("");
    svgEl("path", { d, fill: "none", stroke: color, "stroke-width": 2 }, svg);
    for (const p of s.points) svgEl("circle", { cx: X(p.x), cy: Y(p.y), r: 3.5, fill: color }, svg).dataset.tip = p.tip;
  });
  legend(svg, series.map((s, k) => [s.name, PALETTE[k % PALETTE.length]]));
  return svg;
}

// Legend rows below the plot; the SVG grows to hold them.
function legend(svg, entries) {
  let x = M.l, y = CHART_H + 4;
  for (const [label, color] of entries) {
    const width = 18 + 5.6 * label.length;
    if (x + width > CHART_W && x > M.l) x = M.l, y += 13;
    svgEl("rect", { x, y: y - 8, width: 9, height: 9, fill: color }, svg);
    svgText(svg, x + 12, y, label, { "font-size": 10 });
    x += width;
  }
  svg.setAttribute("height", y + 6);
}

// Short renderings for axes and tables; the exact figure is always in the hover tip.
function human(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  for (const [s, f] of [["P", 1e15], ["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]])
    if (a >= f) return (v / f).toFixed(a / f < 10 ? 2 : 1) + s;
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

const GROUPED = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });  // one formatter: each new one is slow
function exact(v) {
  return Number.isInteger(v) ? GROUPED.format(v) : String(v);
}
