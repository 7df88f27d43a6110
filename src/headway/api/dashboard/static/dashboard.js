// Polls /dashboard/data.json once a second and redraws the tables; rates are the change of the
// counters between two polls.
"use strict";

let previous = null;

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function number(value, digits) {
  return value === null || value === undefined ? "–" : value.toFixed(digits);
}

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

function draw(data) {
  const before = previous ? new Map(previous.models.map((m) => [m.name, m])) : new Map();
  const seconds = previous ? data.time - previous.time : 0;
  fill("models", data.models, (row, m) => {
    const last = before.get(m.name);
    const rate = last && seconds > 0 ? (m.requests - last.requests) / seconds : null;
    cell(row, m.name);
    cell(row, m.state, m.state === "READY" ? "text" : "text bad");
    cell(row, number(rate, 1)).className = "rate";
    cell(row, number(m.p50_ms, 1));
    cell(row, number(m.p99_ms, 1));
    cell(row, m.slo_attainment === null ? "–" : `${(100 * m.slo_attainment).toFixed(1)}%`);
    cell(row, String(m.queue));
    cell(row, number(m.mean_batch, 1));
    cell(row, String(m.requests)).className = "requests";
    const reasons = Object.entries(m.errors).map(([k, v]) => `${k}: ${v}`).join(", ");
    cell(row, reasons || "–", "text");
    cell(row, m.workers.join(", ") || "–", "text");
  });
  fill("workers", data.workers, (row, w) => {
    cell(row, String(w.worker));
    cell(row, w.node ?? "this machine", "text");
    cell(row, w.models.join(", ") || "–", "text");
    const memory = cell(row, "", "text");
    const budget = w.budget_mb ? ` of ${w.budget_mb.toFixed(0)} MB` : " (no budget)";
    if (w.budget_mb) {
      const bar = document.createElement("span");
      bar.className = "bar";
      const used = document.createElement("span");
      used.style.width = `${Math.min(100, (100 * w.used_mb) / w.budget_mb)}%`;
      bar.appendChild(used);
      memory.appendChild(bar);
    }
    memory.append(` ${w.used_mb.toFixed(1)} MB${budget}`);
  });
  fill("apps", data.apps, (row, a) => {
    cell(row, a.name);
    cell(row, a.policy ?? `flow ${a.flow}`, "text");
    cell(row, String(a.slo_ms));
    const weights = Object.entries(a.weights ?? {}).map(([k, v]) => `${k} ${v.toFixed(2)}`);
    cell(row, weights.join(", ") || "–", "text");
    cell(row, a.default_rate === undefined ? "–" : `${(100 * a.default_rate).toFixed(1)}%`);
  });
  const calls = previous ? new Map(previous.operators.map((o) => [o.name, o.calls])) : new Map();
  fill("operators", data.operators, (row, o) => {
    const last = calls.get(o.name);
    const rate = last !== undefined && seconds > 0 ? (o.calls - last) / seconds : null;
    cell(row, o.app);
    cell(row, o.operator, "text");
    cell(row, o.stage, "text");
    cell(row, number(rate, 1)).className = "rate";
    cell(row, String(o.calls)).className = "calls";
    cell(row, String(o.rows_in));
    cell(row, String(o.rows_out));
    cell(row, number(o.selectivity, 2));
    cell(row, number(o.latency.p50_ms, 2));
    cell(row, number(o.latency.p99_ms, 2));
    cell(row, o.calls ? number((1000 * o.queued_s) / o.calls, 2) : "–");
    cell(row, String(o.errors), o.errors ? "bad" : "");
  });
  previous = data;
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/dashboard/data.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    draw(await response.json());
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    status.textContent = `cannot reach the server (${error.message}); retrying`;
  }
  setTimeout(poll, 1000);
}

poll();
