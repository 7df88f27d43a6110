// Polls the server once a second: /dashboard/data.json (the tables) and the history's new
// samples (/dashboard/history/<last>.json); draws the charts (charts.js), the tables, the flows'
// graphs and the plan (pictures.js). docs/dashboard.md says what each figure means.
"use strict";

const state = { t: [], series: new Map(), last: 0, keep: 900, range: 300, flows: "", plan: false };
// figures counted per interval (drawn as a rate: the count over the interval's seconds)
const COUNTS = new Set(["requests", "answered", "late", "parts", "queries", "calls"]);
const isCount = (figure) => COUNTS.has(figure) || figure.startsWith("rejected:");

function merge(history) {
  if (history.first > state.last + 1) {  // the ring went round since: start again
    state.t = [];
    state.series.clear();
  }
  const before = state.t.length, n = history.t.length;
  if (!n) return;
  state.t.push(...history.t);
  for (const values of state.series.values()) values.push(...new Array(n).fill(null));
  for (const [group, name, figure, values] of history.series) {
    const key = `${group}/${name}/${figure}`;
    let kept = state.series.get(key);
    if (!kept) state.series.set(key, (kept = new Array(before + n).fill(null)));
    kept.splice(before, n, ...values);
  }
  const extra = state.t.length - state.keep;
  if (extra > 0) {
    state.t.splice(0, extra);
    for (const values of state.series.values()) values.splice(0, extra);
  }
  state.last = history.last;
}

// The series of `group` whose figure matches `test`, as chart lines (rates for counts).
function lines(group, test, options = {}) {
  const out = [];
  for (const [key, values] of state.series) {
    const [g, name, figure] = splitKey(key);
    if (g !== group || !test(figure, name)) continue;
    const line = { key, label: options.label ? options.label(name, figure) : name,
      colour: colour(options.colourBy ? options.colourBy(name, figure) : name),
      dash: options.dash ? options.dash(figure) : false, values };
    if (isCount(figure)) {
      line.counts = values;
      line.values = values.map((v, i) => {
        const seconds = i ? state.t[i] - state.t[i - 1] : 1;
        return v === null ? null : v / (seconds > 0 ? seconds : 1);
      });
    }
    if (options.scale) line.values = line.values.map((v) => (v === null ? null : v * options.scale));
    out.push(line);
  }
  return out.sort((a, b) => a.label.localeCompare(b.label));
}

function splitKey(key) {
  const first = key.indexOf("/"), last = key.lastIndexOf("/");
  return [key.slice(0, first), key.slice(first + 1, last), key.slice(last + 1)];
}

function entities(group) {
  return [...new Set([...state.series.keys()].map(splitKey).filter(([g]) => g === group).map(([, n]) => n))].sort();
}

function charts() {
  const base = { times: state.t, window: state.range };
  const traffic = document.getElementById("traffic");
  lineChart(traffic, { ...base, id: "throughput", title: "throughput (answers/s)",
    lines: lines("model", (f) => f === "answered") });
  lineChart(traffic, { ...base, id: "latency", title: "latency p99 (solid) and p50 (dashed), ms", unit: " ms",
    lines: lines("model", (f) => f === "p99_ms" || f === "p50_ms",
      { label: (n, f) => `${n} ${f.slice(0, 3)}`, colourBy: (n) => n, dash: (f) => f === "p50_ms" }) });
  lineChart(traffic, { ...base, id: "slo", title: "SLO attainment (%)", unit: "%", max: 100,
    lines: lines("model", (f) => f === "slo", { scale: 100 }) });
  lineChart(traffic, { ...base, id: "rejections", title: "rejections by reason (/s)",
    lines: lines("model", (f) => f.startsWith("rejected:"),
      { label: (n, f) => `${n}: ${f.slice(9)}`, colourBy: (n, f) => `${n}:${f}` }) });
  lineChart(traffic, { ...base, id: "queue", title: "queue length", lines: lines("model", (f) => f === "queue") });
  lineChart(traffic, { ...base, id: "batch", title: "mean batch size (rows)",
    lines: lines("model", (f) => f === "batch") });
  const streams = document.getElementById("streams");
  const ttfp = lines("model", (f) => f.startsWith("ttfp_"),
    { label: (n, f) => `${n} ${f.slice(5, 8)}`, colourBy: (n) => n, dash: (f) => f === "ttfp_p50_ms" });
  streams.closest("section").hidden = !ttfp.length;
  if (ttfp.length) {
    lineChart(streams, { ...base, id: "ttfp", title: "time to first part p99 (solid) and p50 (dashed), ms", unit: " ms", lines: ttfp });
    lineChart(streams, { ...base, id: "tpot", title: "time per part p99 (solid) and p50 (dashed), ms", unit: " ms",
      lines: lines("model", (f) => f.startsWith("tpot_"),
        { label: (n, f) => `${n} ${f.slice(5, 8)}`, colourBy: (n) => n, dash: (f) => f === "tpot_p50_ms" }) });
    lineChart(streams, { ...base, id: "parts", title: "parts per second", lines: lines("model", (f) => f === "parts") });
  }
  const workers = document.getElementById("worker-charts");
  const label = (n) => `worker ${n}`;
  lineChart(workers, { ...base, id: "cpu", title: "CPU (% of one core)", unit: "%",
    lines: lines("worker", (f) => f === "cpu", { label }) });
  lineChart(workers, { ...base, id: "memory", title: "resident memory (solid) and its models' (dashed), MB",
    lines: lines("worker", (f) => f === "rss_mb" || f === "models_mb",
      { label: (n, f) => `worker ${n}${f === "models_mb" ? " models" : ""}`, colourBy: label, dash: (f) => f === "models_mb" }) });
  for (const worker of entities("worker")) {
    lineChart(workers, { ...base, id: `busy-${worker}`, title: `worker ${worker}: time running, by model (%)`,
      unit: "%", max: 100, stacked: true,
      lines: lines("worker", (f, n) => n === worker && f.startsWith("busy:"),
        { label: (n, f) => f.slice(5), colourBy: (n, f) => f.slice(5), scale: 100 }) });
  }
  const apps = document.getElementById("app-charts");
  for (const app of entities("app")) {
    const weights = lines("app", (f, n) => n === app && f.startsWith("weight:"),
      { label: (n, f) => f.slice(7), colourBy: (n, f) => f.slice(7) });
    if (weights.length) lineChart(apps, { ...base, id: `weights-${app}`, title: `${app}: selection weights`, lines: weights });
  }
  const flows = document.getElementById("flow-charts");
  for (const app of state.flows ? state.flows.split("\n") : []) {
    lineChart(flows, { ...base, id: `calls-${app}`, title: `${app}: operator calls/s`,
      lines: lines("operator", (f, n) => f === "calls" && n.startsWith(`${app}/`), { label: (n) => n.slice(app.length + 1) }) });
  }
}

// -- tables -----------------------------------------------------------------------------------
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

const number = (value, digits) => (value === null || value === undefined ? "–" : value.toFixed(digits));
const megabytes = (mb) => (mb === null || mb === undefined ? "–" : mb < 1 ? `${(1024 * mb).toFixed(0)} KB` : `${mb.toFixed(1)} MB`);
const percent = (value) => (value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)}%`);

function fill(id, items, draw) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  for (const item of items) {
    const row = document.createElement("tr");
    row.dataset.name = item.name ?? String(item.worker);
    draw(row, item);
    body.appendChild(row);
  }
}

function tables(data) {
  fill("models", data.models, (row, m) => {
    cell(row, m.name);
    cell(row, m.warming ? "WARMING" : m.state, m.state === "READY" ? "text" : "text bad").title = m.reason;
    cell(row, String(m.replicas), "replicas").title = m.workers.length ? `workers ${m.workers.join(", ")}` : "";
    cell(row, number(m.rate, 1), "rate");
    cell(row, number(m.p50_ms, 1));
    cell(row, number(m.p99_ms, 1));
    cell(row, percent(m.slo_attainment));
    cell(row, String(m.queue));
    cell(row, number(m.mean_batch, 1), "batch");
    cell(row, String(m.requests), "requests");
    const reasons = Object.entries(m.errors).map(([k, v]) => `${k}: ${v}`).join(", ");
    cell(row, reasons || "–", "text");
    cell(row, megabytes(m.memory_mb), "memory");
    cell(row, String(m.measuring_runs), "measuring");
  });
  fill("workers", data.workers, (row, w) => {
    cell(row, String(w.worker));
    cell(row, w.node ?? "this machine", "text");
    cell(row, w.models.join(", ") || "–", "text models");
    const memory = cell(row, "", "text models-mb");
    if (w.budget_mb) {
      const bar = document.createElement("span");
      bar.className = "bar";
      const used = document.createElement("span");
      used.style.width = `${Math.min(100, (100 * w.models_mb) / w.budget_mb)}%`;
      bar.appendChild(used);
      memory.appendChild(bar);
    }
    memory.append(` ${megabytes(w.models_mb)}${w.budget_mb ? ` of ${w.budget_mb.toFixed(0)} MB` : ""}`);
    cell(row, megabytes(w.rss_mb), "rss");
    cell(row, w.cpu === null ? "–" : `${w.cpu.toFixed(0)}%`, "cpu");
    cell(row, w.running ?? "idle", "text running");
  });
  fill("apps", data.apps, (row, a) => {
    cell(row, a.name);
    cell(row, a.policy ?? "flow", "text");
    cell(row, String(a.slo_ms));
    const weights = Object.entries(a.weights ?? {}).map(([k, v]) => `${k} ${v.toFixed(2)}`);
    cell(row, weights.join(", ") || "–", "text");
    cell(row, a.default_rate === undefined ? "–" : percent(a.default_rate));
  });
  fill("operators", data.operators, (row, o) => {
    cell(row, o.app);
    cell(row, o.operator, "text");
    cell(row, o.stage, "text");
    cell(row, number(o.rate, 1), "rate");
    cell(row, String(o.calls), "calls");
    cell(row, String(o.rows_in));
    cell(row, String(o.rows_out));
    cell(row, number(o.selectivity, 2));
    cell(row, number(o.latency.p50_ms, 2));
    cell(row, number(o.latency.p99_ms, 2));
    cell(row, o.calls ? number((1000 * o.queued_s) / o.calls, 2) : "–");
    cell(row, String(o.errors), o.errors ? "bad" : "");
  });
}

// -- flows and the plan: fetched when they change ---------------------------------------------
async function flows(data) {
  const names = data.flows.join("\n");
  document.getElementById("flows").hidden = !names;
  const graphs = document.getElementById("graphs");
  if (names !== state.flows) {
    state.flows = names;
    state.graphs = names ? await (await fetch("/dashboard/flows.json")).json() : [];
    graphs.replaceChildren();
  }
  const figures = new Map(data.operators.map((o) => [o.name, o]));
  for (const flow of state.graphs ?? []) flowGraph(graphs, flow, figures);
}

async function plan(data) {
  if (!data.plan || state.plan) return;
  state.plan = true;
  const document_ = await (await fetch("/dashboard/plan.json")).json();
  const section = document.getElementById("plan");
  section.hidden = false;
  const report = document_.report ?? {};
  section.querySelector(".summary").textContent = `${document_.app}: $${document_.cost_per_hour}/h, ` +
    `simulated p99 ${document_.p99_ms} ms against an SLO of ${document_.slo_ms} ms at ${document_.rate_qps} queries/s` +
    (report.attainment === undefined ? "" : `, ${(100 * report.attainment).toFixed(2)}% within it`);
  const stages = Object.entries(document_.stages ?? {}).map(([name, s]) => ({ name, ...s }));
  fill("plan-stages", stages, (row, s) => {
    cell(row, s.name);
    cell(row, s.model, "text");
    cell(row, s.hardware, "text");
    cell(row, String(s.max_batch_size));
    cell(row, String(s.replicas));
    cell(row, percent(s.utilisation));
    cell(row, s.cost_per_hour.toFixed(3));
  });
  const rows = [{ name: "plan", cost_per_hour: document_.cost_per_hour, p99_ms: document_.p99_ms,
    attainment: report.attainment, config: stages.map((s) => `${s.name}: ${s.hardware} b${s.max_batch_size} ×${s.replicas}`).join(", ") }];
  for (const [name, b] of Object.entries(report.baselines ?? {})) rows.push({ name: label(name), ...b });
  fill("plan-baselines", rows, (row, b) => {
    cell(row, b.name);
    cell(row, b.cost_per_hour === undefined ? "–" : b.cost_per_hour.toFixed(3));
    cell(row, number(b.p99_ms, 1));
    cell(row, percent(b.attainment));
    cell(row, b.infeasible ?? (typeof b.config === "string" ? b.config : Object.entries(b.config ?? {}).map(([k, v]) => `${k}: ${v}`).join(", ")), "text");
  });
  distribution(section.querySelector(".distribution"), document_);
}

// -- polling ----------------------------------------------------------------------------------
async function poll() {
  const status = document.getElementById("status");
  try {
    const [data, history] = await Promise.all([
      fetch("/dashboard/data.json", { cache: "no-store" }).then(checked),
      fetch(`/dashboard/history/${state.last}.json`, { cache: "no-store" }).then(checked),
    ]);
    state.keep = data.history.seconds || state.keep;
    merge(history);
    await flows(data);
    charts();
    tables(data);
    await plan(data);
    document.body.dataset.samples = String(state.t.length);
    document.body.dataset.last = String(state.last);
    status.textContent = `updated ${new Date().toLocaleTimeString()} · ${data.history.samples} s of history`;
  } catch (error) {
    status.textContent = `cannot reach the server (${error.message}); retrying`;
  }
  setTimeout(poll, 1000);
}

async function checked(response) {
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return response.json();
}

for (const button of document.querySelectorAll("#range button")) {
  button.addEventListener("click", () => {
    state.range = Number(button.dataset.seconds);
    for (const other of document.querySelectorAll("#range button")) other.classList.toggle("on", other === button);
    charts();
  });
}

poll();
