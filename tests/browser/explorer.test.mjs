// The explorer page in real headless Chromium (Debian's), driven by playwright-core: open the
// page from a file URL, move sliders, type values, add and remove a model, rename one, switch
// language. After every step each model's displayed totals must equal, exactly, what
// `wren explore --format json` prints for the same description and knobs; the description is
// the one the page downloads, so every step also checks that the download round-trips.
// Usage: node explorer.test.mjs WREN_BINARY   (run by scripts/test-browser)
import { chromium } from "playwright-core";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import assert from "node:assert/strict";

const wren = path.resolve(process.argv[2] ?? "build/wren");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "wren-browser-"));
const pagePath = path.join(work, "explorer.html");
execFileSync(wren, ["explore", "--html", pagePath]);

const browser = await chromium.launchPersistentContext(path.join(work, "profile"), {
  executablePath: "/usr/bin/chromium", headless: true, acceptDownloads: true, viewport: { width: 1500, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const page = browser.pages()[0] ?? (await browser.newPage());
const errors = [];
page.on("pageerror", e => errors.push(e.message));
page.on("request", r => { if (!r.url().startsWith("file:") && !r.url().startsWith("data:") && !r.url().startsWith("blob:")) errors.push("network: " + r.url()); });

let checks = 0;
const card = i => page.locator(".model").nth(i);

// The description the page downloads for model i (and its knobs, which are not part of it).
async function download(i) {
  // A click that lands while a re-render (the language switch) replaces the card's button
  // starts no download (seen once in ~5 runs); click again, at most three times.
  let d;
  for (let attempt = 0; !d; ++attempt) {
    try {
      [d] = await Promise.all([page.waitForEvent("download", { timeout: 10000 }), card(i).locator("button.download").click()]);
    } catch (e) {
      if (attempt == 2) throw e;
    }
  }
  const file = path.join(work, `model-${i}-${checks}.json`);
  await d.saveAs(file);
  return file;
}

async function knobsOf(i) {
  return page.evaluate(i => {
    const uid = Number(document.querySelectorAll(".model")[i].dataset.uid);
    const m = window.wrenModels.find(m => m.uid === uid);
    return { knobs: m.knobs, context: m.context };
  }, i);
}

function cliReport(file, { knobs, context }) {
  const args = ["explore", file, "--format", "json", "--context", String(context), "--weights", knobs.weights, "--kv", knobs.kv,
                "--firing", String(knobs.firing), "--v-read", String(knobs.v_read), "--bandwidth", String(knobs.bandwidth)];
  if (knobs.head) args.push("--head", knobs.head);
  if (knobs.engram) args.push("--engram", knobs.engram);
  if (knobs.engram_storage) args.push("--engram-storage");
  const r = spawnSync(wren, args, { encoding: "utf8" });
  return r.status === 0 ? { report: JSON.parse(r.stdout).models[0] } : { error: r.stderr.trim() };
}

// Every model shown: displayed totals == wren explore's, or the same validator message.
async function checkAll(step) {
  const n = await page.locator(".model").count();
  for (let i = 0; i < n; ++i) {
    const file = await download(i);
    const cli = cliReport(file, await knobsOf(i));
    const shown = await card(i).evaluate(c => ({
      error: c.querySelector(".error").textContent,
      rows: [...c.querySelectorAll(".totals tr")].map(r => ({ ...r.dataset, text: r.cells[1].textContent, tip: r.cells[1].dataset.tip })),
    }));
    if (cli.error) {
      // wren names the file, the page names "model": the rest is the validator's message.
      const message = cli.error.slice(cli.error.indexOf(file) + file.length);
      assert.ok(shown.error.endsWith(message), `${step}, model ${i}: page shows "${shown.error}", wren says "${cli.error}"`);
      assert.equal(shown.rows.length, 0);
      ++checks;
      continue;
    }
    assert.equal(shown.error, "", `${step}, model ${i}`);
    assert.ok(shown.rows.length >= 11, `${step}, model ${i}: ${shown.rows.length} totals`);
    for (const r of shown.rows) {
      const slot = cli.report[r.section][r.metric];
      const want = r.context ? slot[r.context] : slot;
      assert.equal(Number(r.exact), want, `${step}, model ${i}: ${r.section} / ${r.metric} ${r.context}`);
      assert.ok(r.tip.endsWith(Number.isInteger(want) ? want.toLocaleString("en-US") : String(want)), r.tip);
      ++checks;
    }
  }
}

// A slider move: set the range input and fire "input" as a drag does; the time to the next
// painted frame is the update latency.
async function slide(i, selector, value) {
  return card(i).locator(selector).first().evaluate(async (r, v) => {
    const t0 = performance.now();
    r.value = v;
    r.dispatchEvent(new Event("input", { bubbles: true }));
    await new Promise(res => requestAnimationFrame(() => requestAnimationFrame(res)));
    return performance.now() - t0;
  }, String(value));
}

async function type(i, selector, value) {
  const f = card(i).locator(selector).first();
  await f.fill(String(value));
  await f.dispatchEvent("change");
}

const t0 = Date.now();
await page.goto("file://" + pagePath);
await page.waitForFunction(() => window.wrenReady);
const load = await page.evaluate(() => ({
  ready: window.wrenReady, marks: performance.getEntriesByType("mark").map(m => `${m.name} ${m.startTime.toFixed(0)}`).join(", ") }));
const names = await page.locator(".model .name").evaluateAll(e => e.map(x => x.value));
assert.deepEqual(names, ["embla-1", "nenya", "qwen3-30b-a3b", "deepseek-v2-lite"]);
await checkAll("opened");

// Hover: a chart mark shows its exact figure (the training FLOPs of model 0 at 1K).
const qwenFile = await download(2), emblaFile = await download(0);
const emblaAt1K = cliReport(emblaFile, { ...(await knobsOf(0)), context: 1024 }).report["FLOPs per token: training"].total["1K"];
await page.locator("#charts svg").nth(2).locator("circle").first().hover();
const tip = await page.locator("#tip").textContent();
assert.ok(tip.startsWith(`embla-1 · n = 1K: ${emblaAt1K.toLocaleString("en-US")}`), tip);
// Formulas: the seed's P_routed with qwen3's values, and the cost model's figure beside it.
const qwen = cliReport(qwenFile, await knobsOf(2)).report;
const routed = await card(2).locator('.formula[data-id="P_routed"]').textContent();
assert.ok(routed.includes("= 48 × 3 × 2048 × 768 × 128 = 28,991,029,248"), routed);
assert.ok(routed.includes(`cost model: ${qwen.parameters.routed_experts.toLocaleString("en-US")}`), routed);

const sliderTimes = [];
// Embla's engram is a residual source of width d_model: a wider d_model alone is invalid.
sliderTimes.push(await slide(0, 'input[type=range][data-knob="d_model"]', 2560));
sliderTimes.push(await slide(1, 'input[type=range][data-knob="n_experts"]', 96));
sliderTimes.push(await slide(2, 'input[type=range][data-knob="context"]', 18));  // 256K
sliderTimes.push(await slide(3, 'input[type=range][data-knob="kv_lora_rank"]', 256));
sliderTimes.push(await slide(0, 'input[type=range][data-knob="firing"]', 0.3));
sliderTimes.push(await slide(0, 'input[type=range][data-knob="bandwidth"]', 200));
await checkAll("sliders moved");

await type(2, 'input.field[data-knob="n_kv_heads"]', 8);
await type(3, 'input.field[data-knob="n_layers"]', 20);  // deepseek: 1 dense + 19 MoE layers
assert.equal(await card(3).locator('input.field[data-knob="repeat"]').nth(1).inputValue(), "19");
await type(1, 'input.field[data-knob="context"]', 50000);
await type(0, 'input.text[data-knob="kv_precision"]', "int8:g128");
await type(0, 'input.field[data-knob="rows"]', 999983);
await type(0, 'input.field[data-knob="row_dim"]', 160);  // 2 orders x 8 heads x 160 = d_model 2560 again
await checkAll("values typed");

// An invalid setting: the validator's message, on the page and from wren alike.
await type(2, 'input.field[data-knob="n_kv_heads"]', 5);
await checkAll("heads that do not divide");
assert.match(await card(2).locator(".error").textContent(), /n_heads 32 is not divisible by n_kv_heads 5/);
await type(2, 'input.field[data-knob="n_kv_heads"]', 4);

// Add a preset and a copy, rename one, remove one.
await page.selectOption("#add-source", "preset:olmoe-1b-7b");
await page.click("#add");
await page.selectOption("#add-source", { index: (await page.locator("#add-source option").count()) - 1 });
await page.click("#add");
assert.equal(await page.locator(".model").count(), 6);
await type(5, "input.name", "my-model");
await slide(5, 'input[type=range][data-knob="top_k"]', 2);
await checkAll("added, copied, renamed");
await card(1).locator("button.remove").click();
assert.equal(await page.locator(".model").count(), 5);
await checkAll("removed");

await page.selectOption("#lang", "zh");
assert.equal(await page.locator("#title").textContent(), "Wren 模型探索器");
assert.equal(await card(0).locator(".totals td").first().textContent(), "层数");
assert.equal(await page.locator("#add").textContent(), "+ 添加");
await checkAll("Chinese");
await page.selectOption("#lang", "en");
await page.screenshot({ path: path.join(work, "explorer.png") });

assert.deepEqual(errors, []);
const handler = await page.evaluate(() => window.wrenTimings);
const median = [...handler].sort((a, b) => a - b)[handler.length >> 1];
await browser.close();
const best = Math.min(...sliderTimes), worst = Math.max(...sliderTimes);
console.log(`explorer page: ${checks} figures equal wren explore --format json; page ready ${load.ready.toFixed(0)} ms ` +
            `after navigation start (${load.marks} ms); slider update to painted frame ${best.toFixed(1)}-${worst.toFixed(1)} ms ` +
            `(${sliderTimes.map(x => x.toFixed(0)).join(", ")}; the first move includes WebAssembly tier-up); ` +
            `compute and redraw in the handler median ${median.toFixed(1)} ms over ${handler.length} updates; whole test ${((Date.now() - t0) / 1000).toFixed(1)} s`);
if (process.env.WREN_SCREENSHOT) fs.copyFileSync(path.join(work, "explorer.png"), process.env.WREN_SCREENSHOT);
fs.rmSync(work, { recursive: true, force: true });
