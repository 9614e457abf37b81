// The backward-sweep page of retrograd (src/viz/html.rs writes it). Every
// number shown comes from the JSON the engine recorded; this script only
// replays the recorded steps: it never computes a gradient.
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("sweep-data").textContent);
  const steps = data.steps;
  const svg = document.querySelector("#graph svg");
  const $ = (id) => document.getElementById(id);
  const NS = "http://www.w3.org/2000/svg";
  const values = data.values;
  const label = (v) => values[v].label;
  const edgeOf = new Map(data.edges.map((e) => [e.node + ":" + e.input, e.id]));
  const unitEls = Object.keys(data.units).map((id) => [id, $(id)]).filter(([, el]) => el);

  // Gradient badges: the last label line of each node that gets a
  // gradient (html.rs reserved it). Graphviz keeps a node's text inside its
  // group; the built-in renderer writes it right after the group.
  const badges = data.badges.map((b) => {
    const el = $(b.unit);
    if (!el) return null;
    let lines = el.querySelectorAll("text");
    if (!lines.length && el.nextElementSibling?.tagName === "text") lines = el.nextElementSibling.querySelectorAll("tspan");
    const text = lines[lines.length - 1];
    if (!text) return null;
    text.classList.add("grad-badge");
    text.dataset.unit = b.unit;
    text.dataset.value = b.value;
    return { value: b.value, text };
  }).filter(Boolean);

  // The table of every value the sweep touches or the picture shows.
  const touched = new Set(steps.flatMap((s) => s.contributions.map((c) => c.value)));
  const rows = new Map();
  values.forEach((v, id) => {
    if (!touched.has(id) && !v.listed) return;
    const tr = document.createElement("tr");
    tr.dataset.value = id;
    if (v.note && !touched.has(id)) tr.classList.add("dead");
    tr.innerHTML = "<td class=name></td><td class=shape></td><td class=grad></td>";
    tr.cells[0].textContent = v.label;
    tr.cells[1].textContent = v.long.split(/[:=]/)[0].trim();
    tr.title = `${v.label}: ${v.long}` + (v.note ? `\n${v.note}` : "");
    document.querySelector("#grads tbody").appendChild(tr);
    rows.set(id, tr);
  });

  // Small graphs grow to the width; large ones shrink a little, then scroll.
  if (svg) {
    const w = svg.viewBox.baseVal.width || svg.getBBox().width;
    const h = svg.viewBox.baseVal.height || svg.getBBox().height;
    const scale = Math.min(2, Math.max(0.6, ($("graph").clientWidth - 4) / w));
    svg.setAttribute("width", w * scale);
    svg.setAttribute("height", h * scale);
  }

  /** Gradients after step k: the last total recorded for each value (and its one-number form). */
  function stateAt(k) {
    const grads = new Map();
    const tiny = new Map();
    const released = new Set();
    for (let i = 0; i <= k; i++) {
      for (const c of steps[i].contributions) { grads.set(c.value, c.total); tiny.set(c.value, c.total_tiny); }
      if (steps[i].released) released.add(steps[i].value);
    }
    return { grads, tiny, released };
  }

  function narrate(k) {
    const s = steps[k];
    const root = data.root.label;
    const parts = [];
    if (s.kind === "seed") {
      parts.push(`Seed: the gradient of <b>${esc(root)}</b> with respect to itself is <b>${esc(s.contributions[0].total)}</b>.`);
    } else if (s.kind === "hooks") {
      parts.push(`The hooks of ${esc(label(s.value))} ran on its complete gradient.`);
    } else {
      const node = data.nodes[s.node];
      const pos = data.order.indexOf(s.node) + 1;
      parts.push(`<b>${esc(node.text)}</b> runs its backward (node ${pos} of ${data.order.length} in backward_order(${esc(root)}))`);
      if (s.grad_output === null) {
        parts.push("but no gradient reached it, so it sends nothing.");
      } else {
        parts.push(`with the gradient of its output, ${esc(label(node.output))}: <b>${esc(s.grad_output)}</b>.`);
        const sent = node.inputs.map((v, p) => {
          const c = s.contributions.find((c) => c.input === p);
          if (!c) return `${esc(label(v))} gets none (${values[v].kind === "constant" ? "a constant" : "the op sends none"})`;
          const add = c.previous === null ? "" : `, added to the ${esc(c.previous)} already there (a second use): now <b>${esc(c.total)}</b>`;
          return `${esc(label(v))} gets <b>${esc(c.gradient)}</b>${add}`;
        });
        parts.push("It sends: " + sent.join("; ") + ".");
        if (s.released) parts.push(`The sweep then releases ${esc(label(node.output))}'s gradient (not retained).`);
      }
    }
    if (k === steps.length - 1) {
      parts.push(`<br>Done: every node of backward_order(${esc(root)}) = [${data.order.join(", ")}] has run.`);
      const dead = data.nodes.map((n, i) => [n, i]).filter(([n]) => !n.live);
      if (dead.length) {
        const list = dead.slice(0, 6).map(([n]) => esc(n.text)).join("; ");
        const more = dead.length > 6 ? ` and ${dead.length - 6} more` : "";
        parts.push(`Never visited: ${list}${more}: ${dead.length === 1 ? "it does" : "they do"} not lead to ${esc(root)}.`);
      }
    }
    return parts.join(" ");
  }

  let labels = [];
  function render(k) {
    const s = steps[k];
    const { grads, tiny, released } = stateAt(k);
    const changed = new Set(s.contributions.map((c) => c.value));
    document.querySelectorAll("#graph .current, #graph .flow, #graph .done").forEach((el) => el.classList.remove("current", "flow", "done"));
    labels.forEach((l) => l.remove());
    labels = [];
    for (let i = 1; i < k; i++) if (steps[i].kind === "node") $(data.nodes[steps[i].node].unit)?.classList.add("done");
    if (s.kind === "node") {
      const unit = $(data.nodes[s.node].unit);
      unit?.classList.add("current");
      unit?.scrollIntoView({ block: "nearest", inline: "nearest" });
      for (const c of s.contributions) {
        const edge = $(edgeOf.get(s.node + ":" + c.input));
        if (!edge) continue;
        edge.classList.add("flow");
        const path = edge.tagName === "path" ? edge : edge.querySelector("path");
        const at = path.getPointAtLength(path.getTotalLength() / 2);
        const text = document.createElementNS(NS, "text");
        text.setAttribute("class", "flow-label");
        text.setAttribute("x", at.x + 6);
        text.setAttribute("y", at.y + 4);
        text.textContent = c.previous === null ? c.tiny : `+${c.tiny} → ${c.total_tiny}`;
        edge.parentNode.appendChild(text);
        // Near the picture's right edge, the label goes left of the edge.
        const view = svg.viewBox.baseVal;
        if (view.width && text.getBBox().x + text.getBBox().width > view.x + view.width) {
          text.setAttribute("x", at.x - 6);
          text.setAttribute("text-anchor", "end");
        }
        labels.push(text);
      }
    } else if (s.kind === "seed") {
      const unit = values[data.root.value].unit;
      if (unit) $(unit).classList.add("current");
    }
    for (const b of badges) {
      const g = tiny.get(b.value);
      b.text.textContent = g === undefined ? "" : `grad ${g}`;
      b.text.classList.toggle("changed", changed.has(b.value));
      b.text.classList.toggle("released", released.has(b.value));
    }
    for (const [v, tr] of rows) {
      const g = grads.get(v);
      tr.cells[2].textContent = g === undefined ? "" : g;
      tr.classList.toggle("changed", changed.has(v));
      tr.classList.toggle("released", released.has(v));
    }
    const first = [...changed].map((v) => rows.get(v)).find(Boolean);
    if (first) first.scrollIntoView({ block: "nearest" });
    $("narration").innerHTML = narrate(k);
    $("step-count").textContent = `step ${k} of ${steps.length - 1}`;
    $("scrub").value = k;
    $("first").disabled = $("prev").disabled = k === 0;
    $("next").disabled = $("last").disabled = k === steps.length - 1;
    document.body.dataset.step = k;
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }

  // Hover: what the picture node holds, its gradient now, why it is grey.
  const tip = $("tooltip");
  let step = 0;
  for (const [id, el] of unitEls) {
    el.addEventListener("mousemove", (e) => {
      const unit = data.units[id];
      const v = unit.value === null ? null : values[unit.value];
      let html = esc(unit.lines.join("\n"));
      if (v && !unit.lines.some((l) => l.startsWith("= "))) html += "\n" + esc(v.long);
      if (v && steps.length && !v.note) {
        const g = stateAt(step).grads.get(unit.value);
        html += "\ngrad " + (g === undefined ? "(none yet)" : esc(g));
      }
      const note = v ? v.note : unit.dead ? "not in backward_order" : null;
      if (note) html += `\n<span class=note>${esc(note)}</span>`;
      tip.innerHTML = html;
      tip.hidden = false;
      tip.style.left = Math.min(e.clientX + 14, innerWidth - tip.offsetWidth - 8) + "px";
      tip.style.top = Math.min(e.clientY + 14, innerHeight - tip.offsetHeight - 8) + "px";
    });
    el.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  if (!steps.length) {
    $("controls").hidden = true;
    $("narration").textContent = "No root was given, so there is no sweep to step through: hover over a node to see its value and shape.";
    return;
  }
  const go = (k) => { step = Math.max(0, Math.min(steps.length - 1, k)); render(step); };
  $("scrub").max = steps.length - 1;
  $("first").onclick = () => go(0);
  $("prev").onclick = () => go(step - 1);
  $("next").onclick = () => go(step + 1);
  $("last").onclick = () => go(steps.length - 1);
  $("scrub").oninput = (e) => go(Number(e.target.value));
  document.addEventListener("keydown", (e) => {
    const to = { ArrowRight: step + 1, ArrowDown: step + 1, ArrowLeft: step - 1, ArrowUp: step - 1, Home: 0, End: steps.length - 1 }[e.key];
    if (to === undefined || e.target.tagName === "INPUT") return;
    e.preventDefault();
    go(to);
  });
  go(0);
})();
