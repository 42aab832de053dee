// The playground page: streams a rewrite over /ws/rewrite and shows where each output piece came from.
"use strict";

const $ = (id) => document.getElementById(id);
const els = {
  doc: $("document"), sourceView: $("source-view"), editDoc: $("edit-doc"), sample: $("sample"),
  instruction: $("instruction"), preset: $("preset"), strategy: $("strategy"), temperature: $("temperature"),
  maxTokens: $("max-tokens"), compare: $("compare"), run: $("run"), stop: $("stop"), status: $("status"),
  output: $("output"), diff: $("diff"), chart: $("chart"), compareResult: $("compare-result"),
  modelStatus: $("model-status"), modelText: $("model-text"), unfinished: $("unfinished"), noChange: $("no-change"),
  language: $("language"), checks: $("checks"), checksSummary: $("checks-summary"), problems: $("problems"),
};

let samples = [];
let socket = null;
let running = false;
let plan = [];          // strategies still to run (compare mode runs "ar" first)
let compareRuns = [];   // [{strategy, stats}]
let run = null;         // the run being shown: {document, text, chars, tokens, steps}

// The server's offsets count code points (Python string indices); JavaScript strings count UTF-16
// units, which differ after an emoji. So text is sliced as arrays of code points.
const codePoints = (text) => Array.from(text);
const slice = (chars, a, b) => chars.slice(a, b).join("");

// ------------------------------------------------------------------ model status and samples

async function pollHealth() {
  try {
    const health = await (await fetch("/healthz")).json();
    if (!els.strategy.options.length) {
      for (const s of health.strategies) els.strategy.add(new Option(s, s));
    }
    if (els.language.options.length === 1) {
      for (const language of health.languages) els.language.add(new Option(language, language));
    }
    if (health.model_loaded) {
      els.modelStatus.className = "model-status ready";
      els.modelText.textContent = `${health.model} ready`;
      if (health.default_strategy && !els.strategy.dataset.touched) els.strategy.value = health.default_strategy;
      if (!running) setStatus("Ready. Pick a sample or paste a document, then Run.");
      els.run.disabled = running;
      return;
    }
    if (health.error) {
      els.modelStatus.className = "model-status failed";
      els.modelText.textContent = "model failed to load";
      setStatus(health.error, true);
      return;
    }
  } catch (e) { /* the server is starting */ }
  setTimeout(pollHealth, 1000);
}

async function loadSamples() {
  samples = await (await fetch("/api/samples")).json();
  samples.forEach((s, i) => els.sample.add(new Option(`${s.id} (${s.task}, ${s.document.length} chars)`, i)));
  // A first sample fills an empty page only: what the user typed or pasted meanwhile is never replaced.
  if (samples.length && !els.doc.value && !els.instruction.value) pickSample(0);
}

function pickSample(i) {
  const s = samples[i];
  els.sample.value = String(i);
  els.doc.value = s.document;
  els.instruction.value = s.instruction;
  els.language.value = s.language || "";
  showEditor();
}

// ------------------------------------------------------------------ running

function setStatus(text, error = false) {
  els.status.textContent = text;
  els.status.classList.toggle("error", error);
}

function connect() {
  return new Promise((resolve, reject) => {
    if (socket && socket.readyState === WebSocket.OPEN) return resolve(socket);
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/rewrite`);
    socket.onopen = () => resolve(socket);
    socket.onerror = () => reject(new Error("cannot connect to the server"));
    socket.onclose = () => {
      if (running) fail("The connection closed before the answer finished.");
      socket = null;
    };
    socket.onmessage = (event) => onMessage(JSON.parse(event.data));
  });
}

async function start() {
  const document_ = els.doc.value, instruction = els.instruction.value;
  if (!document_.trim() || !instruction.trim()) return setStatus("Enter a document and an instruction.", true);
  const chosen = els.strategy.value;
  plan = els.compare.checked && chosen !== "ar" ? ["ar", chosen] : [chosen];
  compareRuns = [];
  els.compareResult.classList.add("hidden");
  running = true;
  els.run.disabled = true;
  els.stop.disabled = false;
  try {
    await connect();
  } catch (e) {
    return finish(e.message, true);
  }
  next();
}

function next() {
  const strategy = plan.shift();
  const request = {
    document: els.doc.value, instruction: els.instruction.value, strategy,
    temperature: Number(els.temperature.value) || 0,
  };
  const max = parseInt(els.maxTokens.value, 10);  // empty: not sent, the engine's budget applies
  if (max > 0) request.max_new_tokens = max;
  if (els.language.value) request.language = els.language.value;
  run = { document: request.document, strategy, text: "", chars: [], tokens: [], steps: [], rendered: 0 };
  markUnfinished(null);
  markNoChange(null);
  hideChecks();
  els.output.textContent = "";
  els.diff.textContent = "";
  renderSourceView([]);
  showSourceView();
  resetFigures();
  setStatus(`Running ${strategy}…`);
  socket.send(JSON.stringify(request));
}

function stop() {
  plan = [];
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "cancel" }));
  setStatus("Stopping…");
}

// An answer that did not end by itself (token limit, cancel, failure) is never shown as if whole.
function markUnfinished(reason) {
  els.unfinished.textContent = reason ? `Unfinished: ${reason}` : "";
  els.unfinished.classList.toggle("hidden", !reason);
  els.output.classList.toggle("partial", Boolean(reason));
  els.diff.classList.toggle("partial", Boolean(reason));
}

// A finished answer that made no edit (the text back, or only its layout or comments changed) is not a success.
function markNoChange(note) {
  els.noChange.textContent = note ? capitalized(note) : "";
  els.noChange.classList.toggle("hidden", !note);
}

function capitalized(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function fail(message) {
  if (run && run.text) markUnfinished(message);
  finish(message, true);
}

function finish(message, error = false) {
  running = false;
  plan = [];
  els.run.disabled = false;
  els.stop.disabled = true;
  setStatus(message, error);
}

function onMessage(msg) {
  if (msg.type === "queued") {
    setStatus(`Queued: ${msg.ahead} request${msg.ahead === 1 ? "" : "s"} ahead of you…`);
  } else if (msg.type === "delta") {
    if (!run.steps.length) setStatus(`Running ${run.strategy}…`);
    run.text += msg.text;
    for (const c of msg.text) run.chars.push(c);  // by code point; no argument-count limit on a long delta
    run.tokens.push(...msg.tokens);
    appendTokens(msg.tokens);
  } else if (msg.type === "step") {
    run.steps.push(msg);
    updateFigures(msg.totals);
    drawChart();
  } else if (msg.type === "repairing") {
    showRepairing(msg);
  } else if (msg.type === "done") {
    onDone(msg);
  } else if (msg.type === "error") {
    fail(msg.message);
  }
}

function onDone(msg) {
  run.text = msg.text;
  run.chars = codePoints(msg.text);
  markUnfinished(msg.complete ? null : msg.reason);
  markNoChange(msg.unchanged ? msg.note : null);
  renderOutput(run.chars, msg.spans);
  showChecks(msg);
  renderSourceView(msg.spans);
  renderDiff(run.document, msg.text);
  updateFigures(msg.stats);
  drawChart();
  const s = msg.stats;
  const outcome = !msg.complete ? "Unfinished" : msg.unchanged ? capitalized(msg.note) : "Done";
  const summary = `${outcome} (${msg.strategy}, ${msg.stopped}): ` +
    `${s.new_tokens} tokens in ${s.seconds.toFixed(2)} s, ${s.steps} steps.`;
  compareRuns.push({ strategy: msg.strategy, stats: s });
  if (plan.length && msg.stopped !== "cancelled") {
    setStatus(summary + " Now the second run…");
    return next();
  }
  if (compareRuns.length === 2) showCompare();
  finish(msg.complete ? summary : `${summary} ${msg.reason}`, !msg.complete);
}

function showCompare() {
  const [a, b] = compareRuns;
  const speedup = a.stats.tokens_per_second > 0 ? b.stats.tokens_per_second / a.stats.tokens_per_second : 0;
  els.compareResult.innerHTML = "";
  const line = (text) => { const d = document.createElement("div"); d.textContent = text; els.compareResult.append(d); };
  line(`${a.strategy}: ${a.stats.tokens_per_second.toFixed(1)} tokens/s (${a.stats.seconds.toFixed(2)} s)`);
  line(`${b.strategy}: ${b.stats.tokens_per_second.toFixed(1)} tokens/s (${b.stats.seconds.toFixed(2)} s, ` +
       `${b.stats.mean_accepted.toFixed(2)} tokens/step)`);
  const strong = document.createElement("strong");
  strong.textContent = `Speed-up: ${speedup.toFixed(2)}×`;
  els.compareResult.append(strong);
  els.compareResult.classList.remove("hidden");
}

// ------------------------------------------------------------------ what the check found

function hideChecks() {
  els.checks.className = "checks hidden";
  els.checksSummary.textContent = "";
  els.problems.textContent = "";
}

// A repair pass runs: its steps are not streamed, and the answer shown is the one being repaired.
function showRepairing(msg) {
  const n = msg.problems.length;
  els.checks.className = "checks repairing problems-found";
  els.checksSummary.textContent = `repairing: the answer introduced ${n} problem${n === 1 ? "" : "s"} (pass ${msg.attempt})`;
  els.problems.textContent = "";
  setStatus(`Repairing ${n} problem${n === 1 ? "" : "s"} (pass ${msg.attempt})…`);
}

// The problems the answer kept, each a link to its line in the output; or why it was not checked.
function showChecks(msg) {
  const problems = msg.problems || [], checks = msg.checks || { ran: [], notes: [] };
  const passes = (msg.repairs || []).filter((r) => r.model !== false);
  const kept = passes.filter((r) => r.kept).length;
  const fixed = (msg.repairs || []).some((r) => r.kept && r.model === false) ? ", fixed without a model" : "";
  const n = problems.length;
  els.checks.className = n ? "checks problems-found" : "checks";
  els.problems.textContent = "";
  if (!checks.ran.length) {
    const why = checks.notes.map((note) => note.replace(/^unchecked: /, "")).join("; ");
    els.checksSummary.textContent = why ? `unchecked: ${why}` : "unchecked";
    return;
  }
  const repaired = fixed + (kept ? `, repaired (${kept} pass${kept === 1 ? "" : "es"} kept)` : "");
  els.checksSummary.textContent = `checked (${checks.ran.join(", ")})${repaired}: ` +
    (n ? `${n} problem${n === 1 ? "" : "s"} left` : "no problems");
  for (const p of problems) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "problem";
    button.dataset.line = p.line;
    button.textContent = `line ${p.line + 1}: ${p.message} [${p.code}]`;
    button.addEventListener("click", () => showLine(p.line));
    const item = document.createElement("li");
    item.append(button);
    els.problems.append(item);
  }
}

function showLine(line) {
  document.querySelector(".tab[data-tab=output]").click();
  els.output.querySelectorAll(".problem-line").forEach((e) => e.classList.remove("problem-line"));
  const spans = els.output.querySelectorAll(`span[data-line="${line}"]`);
  spans.forEach((e) => e.classList.add("problem-line"));
  if (spans.length) spans[0].scrollIntoView({ block: "center" });
}

// ------------------------------------------------------------------ output and attribution

function piece(text, source) {
  const span = document.createElement("span");
  span.textContent = text;
  if (source) {
    span.className = "copied";
    span.dataset.sourceStart = source[0];
    span.dataset.sourceEnd = source[1];
  } else {
    span.className = "gen";
  }
  return span;
}

function appendTokens(tokens) {
  const sorted = tokens.slice().sort((x, y) => x.output[0] - y.output[0]);
  for (const t of sorted) {
    const [a, b] = t.output;
    if (a < run.rendered) continue;
    if (a > run.rendered) els.output.append(piece(slice(run.chars, run.rendered, a), null));
    els.output.append(piece(slice(run.chars, a, b), t.source));
    run.rendered = b;
  }
  els.output.scrollTop = els.output.scrollHeight;
}

// The whole answer, its pieces cut after each line break so that a line can be lit up (data-line, 0-based).
function renderOutput(chars, spans) {
  els.output.textContent = "";
  let at = 0, line = 0;
  const frag = document.createDocumentFragment();
  const add = (a, b, source) => {  // a copied piece's source range moves with it: the same characters
    for (let start = a; start < b;) {
      let end = start;
      while (end < b && chars[end] !== "\n") end++;
      end = Math.min(b, end + 1);
      const span = piece(slice(chars, start, end), source && [source[0] + start - a, source[0] + end - a]);
      span.dataset.line = line;
      if (chars[end - 1] === "\n") line++;
      frag.append(span);
      start = end;
    }
  };
  for (const s of spans) {
    const [a, b] = s.output;
    if (a > at) add(at, a, null);
    add(a, b, s.source);
    at = b;
  }
  if (at < chars.length) add(at, chars.length, null);
  els.output.append(frag);
}

// The document, cut at every copied range's edges so a range can be lit up.
function renderSourceView(spans) {
  const doc = codePoints(run ? run.document : els.doc.value);
  const cuts = new Set([0, doc.length]);
  for (const s of spans) if (s.source) { cuts.add(s.source[0]); cuts.add(s.source[1]); }
  const edges = [...cuts].filter((x) => x >= 0 && x <= doc.length).sort((x, y) => x - y);
  const covered = (a, b) => spans.some((s) => s.source && s.source[0] <= a && b <= s.source[1]);
  const frag = document.createDocumentFragment();
  for (let i = 0; i + 1 < edges.length; i++) {
    const [a, b] = [edges[i], edges[i + 1]];
    if (a === b) continue;
    const span = document.createElement("span");
    span.className = covered(a, b) ? "src copied" : "src";
    span.dataset.start = a;
    span.dataset.end = b;
    span.textContent = slice(doc, a, b);
    frag.append(span);
  }
  els.sourceView.textContent = "";
  els.sourceView.append(frag);
}

function clearHighlights() {
  document.querySelectorAll(".hl").forEach((e) => e.classList.remove("hl"));
}

function highlightSource(start, end) {
  let first = null;
  for (const e of els.sourceView.querySelectorAll(".src")) {
    const a = Number(e.dataset.start), b = Number(e.dataset.end);
    if (a < end && b > start) { e.classList.add("hl"); first = first || e; }
  }
  if (first) first.scrollIntoView({ block: "nearest" });
}

function highlightOutputsFrom(start, end) {
  let first = null;
  for (const e of els.output.querySelectorAll(".copied")) {
    const a = Number(e.dataset.sourceStart), b = Number(e.dataset.sourceEnd);
    if (a < end && b > start) { e.classList.add("hl"); first = first || e; }
  }
  if (first) first.scrollIntoView({ block: "nearest" });
}

els.output.addEventListener("mouseover", (event) => {
  const span = event.target.closest(".copied");
  clearHighlights();
  if (!span) return;
  span.classList.add("hl");
  showSourceView();
  highlightSource(Number(span.dataset.sourceStart), Number(span.dataset.sourceEnd));
});
els.output.addEventListener("mouseleave", clearHighlights);
els.sourceView.addEventListener("mouseover", (event) => {
  const span = event.target.closest(".src.copied");
  clearHighlights();
  if (!span) return;
  span.classList.add("hl");
  highlightOutputsFrom(Number(span.dataset.start), Number(span.dataset.end));
});
els.sourceView.addEventListener("mouseleave", clearHighlights);

function showSourceView() {
  if (!run) return;
  els.sourceView.classList.remove("hidden");
  els.editDoc.classList.remove("hidden");
}

function showEditor() {
  els.sourceView.classList.add("hidden");
  els.editDoc.classList.add("hidden");
  els.doc.focus();
}

// ------------------------------------------------------------------ diff

function renderDiff(before, after) {
  const dmp = new diff_match_patch();
  dmp.Diff_Timeout = 1;
  const diffs = dmp.diff_main(before, after);
  dmp.diff_cleanupSemantic(diffs);
  const frag = document.createDocumentFragment();
  for (const [op, text] of diffs) {
    const node = document.createElement(op === DIFF_INSERT ? "ins" : op === DIFF_DELETE ? "del" : "span");
    node.textContent = text;
    frag.append(node);
  }
  els.diff.textContent = "";
  els.diff.append(frag);
}

// ------------------------------------------------------------------ figures and chart

function resetFigures() {
  for (const id of ["fig-tps", "fig-accepted", "fig-copied", "fig-tokens"]) $(id).textContent = "–";
  drawChart();
}

function updateFigures(stats) {  // the engine's running figures (a step's totals, then the result's)
  const copied = run.tokens.filter((t) => t.source).length;
  $("fig-tps").textContent = stats.tokens_per_second.toFixed(1);
  $("fig-accepted").textContent = stats.mean_accepted.toFixed(2);
  $("fig-copied").textContent = run.tokens.length ? `${Math.round((100 * copied) / run.tokens.length)}%` : "–";
  $("fig-tokens").textContent = String(stats.new_tokens);
}

function drawChart() {
  const canvas = els.chart;
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  const steps = run ? run.steps : [];
  if (!steps.length) {
    ctx.fillStyle = "#9aa5b1";
    ctx.font = "12px system-ui, sans-serif";
    ctx.fillText("One bar per step: how many tokens it produced.", 10, height / 2 + 4);
    return;
  }
  const top = Math.max(4, ...steps.map((s) => s.new_tokens));
  const pad = 6, w = (width - 2 * pad) / Math.max(steps.length, 20);
  ctx.strokeStyle = "#e4e7eb";
  ctx.beginPath(); ctx.moveTo(pad, height - pad - (height - 2 * pad) / top); ctx.lineTo(width - pad, height - pad - (height - 2 * pad) / top); ctx.stroke();
  steps.forEach((s, i) => {
    const h = ((height - 2 * pad) * s.new_tokens) / top;
    ctx.fillStyle = s.new_tokens > 1 ? "#2f6fde" : "#b7c4d6";
    ctx.fillRect(pad + i * w + 1, height - pad - h, Math.max(1, w - 2), h);
  });
  ctx.fillStyle = "#6b7785";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(`max ${top}`, width - pad - 42, pad + 10);
}

// ------------------------------------------------------------------ wiring

els.run.addEventListener("click", start);
els.stop.addEventListener("click", stop);
els.editDoc.addEventListener("click", showEditor);
els.sample.addEventListener("change", () => { if (els.sample.value !== "") pickSample(Number(els.sample.value)); });
els.preset.addEventListener("change", () => { if (els.preset.value) els.instruction.value = els.preset.value; els.preset.value = ""; });
els.strategy.addEventListener("change", () => { els.strategy.dataset.touched = "1"; });
document.querySelectorAll(".tab").forEach((tab) => tab.addEventListener("click", () => {
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === tab));
  els.output.classList.toggle("hidden", tab.dataset.tab !== "output");
  els.diff.classList.toggle("hidden", tab.dataset.tab !== "diff");
}));
els.instruction.addEventListener("keydown", (e) => { if (e.key === "Enter" && !els.run.disabled) start(); });

pollHealth();
loadSamples();
drawChart();
