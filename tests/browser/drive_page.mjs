// Drives Debian's chromium, headless, over a backward-sweep page (written
// by `Graph::write_html`) as a person would: it clicks "next" once, then
// presses the right arrow key to the last step, reading at every step what
// the page shows (the node highlighted, the gradient badges on the picture,
// the gradients table, the labels on the edges, the narration) and saving a
// screenshot; then it presses Home and End, and hovers over every node.
// It prints what it saw as one JSON object; tests/sweep_page.rs asserts.
//
//   node tests/browser/drive_page.mjs PAGE.html SCREENSHOT_DIR
//   node tests/browser/drive_page.mjs --screenshot PAGE.html OUT.png [STEP] [WIDTHxHEIGHT]
import { chromium } from "playwright-core";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

async function open(page_file, viewport) {
  // A fresh profile each run; without the background-networking flags
  // chromium keeps trying to reach the network, which is closed here.
  const profile = mkdtempSync(join(tmpdir(), "retrograd-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  // Any request leaving the file is a failure: the page must be self-contained.
  const requests = [];
  page.on("request", (r) => { if (!r.url().startsWith("file:")) requests.push(r.url()); });
  await page.goto(pathToFileURL(resolve(page_file)).href);
  const close = async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); };
  return { page, errors, requests, close };
}

/** What a person sees at the current step. */
async function observe(page) {
  return page.evaluate(() => ({
    step: Number(document.body.dataset.step),
    count: document.getElementById("step-count").textContent,
    current: [...document.querySelectorAll("#graph .current")].map((e) => e.id),
    flows: [...document.querySelectorAll("#graph .flow")].map((e) => e.id),
    flow_labels: [...document.querySelectorAll("#graph .flow-label")].map((e) => e.textContent),
    badges: Object.fromEntries([...document.querySelectorAll("#graph .grad-badge")]
      .map((b) => [b.dataset.unit, b.textContent])),
    table: Object.fromEntries([...document.querySelectorAll("#grads tbody tr")]
      .map((r) => [r.cells[0].textContent, r.cells[2].textContent])),
    narration: document.getElementById("narration").textContent,
    next_disabled: document.getElementById("next").disabled,
  }));
}

async function drive(page_file, shots) {
  mkdirSync(shots, { recursive: true });
  const { page, errors, requests, close } = await open(page_file, { width: 1100, height: 700 });
  const seen = [await observe(page)];
  await page.screenshot({ path: join(shots, "step_0.png"), fullPage: true });
  let first = true;
  while (!seen[seen.length - 1].next_disabled && seen.length < 10000) {
    if (first) await page.click("#next"); else await page.keyboard.press("ArrowRight");
    first = false;
    const now = await observe(page);
    seen.push(now);
    await page.screenshot({ path: join(shots, `step_${now.step}.png`), fullPage: true });
  }
  await page.keyboard.press("Home");
  const home = await observe(page);
  await page.keyboard.press("End");
  const end = await observe(page);
  await page.click("#prev");
  const back = await observe(page);
  const hover = {};
  for (const id of await page.evaluate(() => Object.keys(JSON.parse(document.getElementById("sweep-data").textContent).units))) {
    const el = page.locator(`[id="${id}"]`);
    if (!(await el.count())) continue;
    await el.first().hover({ force: true });
    hover[id] = await page.evaluate(() => document.getElementById("tooltip").hidden ? null : document.getElementById("tooltip").textContent);
  }
  await close();
  return { steps: seen, home: home.step, end: end.step, back: back.step, hover, errors, requests };
}

async function screenshot(page_file, out, step, size) {
  const [width, height] = (size || "1200x800").split("x").map(Number);
  const { page, errors, close } = await open(page_file, { width, height });
  if (step === "last") await page.keyboard.press("End");
  else for (let i = 0; i < Number(step || 0); i++) await page.keyboard.press("ArrowRight");
  await page.screenshot({ path: out });
  await close();
  return { errors };
}

const argv = process.argv.slice(2);
const result = argv[0] === "--screenshot"
  ? await screenshot(argv[1], argv[2], argv[3], argv[4])
  : await drive(argv[0], argv[1]);
process.stdout.write(JSON.stringify(result) + "\n");
