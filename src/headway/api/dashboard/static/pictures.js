// Pictures that are not time series: a flow's operator graph with each operator's live
// figures, and a plan's simulated latency distribution against its SLO.
"use strict";

const BOX_W = 210, LINE_H = 30, HEAD_H = 34, GAP_X = 56, GAP_Y = 18;

// Stages in layers (each one after the longest path from the flow's input), boxes in columns.
function layout(flow) {
  const layer = new Map();
  for (const stage of flow.stages) {  // stages come in plan order: inputs first
    const depth = Math.max(-1, ...stage.inputs.map((i) => layer.get(i) ?? 0));
    layer.set(stage.id, depth + 1);
  }
  const columns = [];
  for (const stage of flow.stages) (columns[layer.get(stage.id)] ??= []).push(stage);
  const place = new Map();
  let height = 0;
  columns.forEach((column, c) => {
    let y = 8;
    for (const stage of column) {
      const h = HEAD_H + LINE_H * (stage.kind === "action" ? stage.operators.length : 0) + 8;
      const offset = stage.replicas > 1 ? 8 : 0;  // room for the racing replicas' shadows
      place.set(stage.id, { x: 8 + c * (BOX_W + GAP_X), y: y + offset, h });
      y += h + GAP_Y + offset;
    }
    height = Math.max(height, y);
  });
  return { place, width: 16 + columns.length * (BOX_W + GAP_X) - GAP_X, height };
}

// `figures`: operator name (app/operator) -> {rate, selectivity, latency: {p99_ms}, errors}.
function flowGraph(container, flow, figures) {
  let figure = container.querySelector(`figure[data-flow="${flow.app}"]`);
  if (!figure) {
    figure = document.createElement("figure");
    figure.className = "flow";
    figure.dataset.flow = flow.app;
    container.appendChild(figure);
  }
  const { place, width, height } = layout(flow);
  const parts = ['<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" ' +
    'markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z" fill="#888"/></marker></defs>'];
  for (const [from, to] of flow.edges) {
    const a = place.get(from), b = place.get(to);
    const x0 = a.x + BOX_W, y0 = a.y + a.h / 2, x1 = b.x - 2, y1 = b.y + b.h / 2;
    const mid = (x0 + x1) / 2;
    parts.push(`<path class="edge" d="M${x0},${y0}C${mid},${y0} ${mid},${y1} ${x1},${y1}" marker-end="url(#arrow)"/>`);
  }
  for (const stage of flow.stages) {
    const { x, y, h } = place.get(stage.id);
    const kind = stage.kind === "action" ? "action" : "frontend";
    for (let k = Math.min(stage.replicas, 3) - 1; k > 0; k--) {  // racing replicas, behind
      parts.push(`<rect class="stage ${kind} shadow" x="${x + 4 * k}" y="${y - 4 * k}" width="${BOX_W}" height="${h}" rx="5"/>`);
    }
    parts.push(`<g class="stage" data-stage="${escape(stage.name)}">` +
      `<rect class="stage ${kind}" x="${x}" y="${y}" width="${BOX_W}" height="${h}" rx="5"/>`);
    const notes = [];
    if (stage.kind === "action" && stage.operators.length > 1) notes.push("fused");
    if (stage.replicas > 1) notes.push(`×${stage.replicas} racing`);
    if (stage.kind !== "action") notes.push(stage.kind === "source" ? "input" : "frontend");
    parts.push(`<text class="head" x="${x + 8}" y="${y + 15}">${escape(short(stage.name, 32))}</text>` +
      `<text class="note" x="${x + 8}" y="${y + 28}">${notes.join(" · ")}</text>`);
    if (stage.kind === "action") {
      stage.operators.forEach((operator, i) => {
        const f = figures.get(`${flow.app}/${operator}`) ?? {};
        const top = y + HEAD_H + i * LINE_H;
        const line = `${format(f.rate, "/s")} · sel ${format(f.selectivity)} · p99 ${format(f.latency?.p99_ms, " ms")}`;
        parts.push(`<g class="operator" data-operator="${escape(`${flow.app}/${operator}`)}"` +
          ` data-calls="${f.calls ?? ""}" data-selectivity="${f.selectivity ?? ""}" data-p99="${f.latency?.p99_ms ?? ""}">` +
          `<text class="op" x="${x + 10}" y="${top + 11}">${escape(short(operator, 28))}</text>` +
          `<text class="figures${f.errors ? " bad" : ""}" x="${x + 10}" y="${top + 24}">${escape(line)}</text></g>`);
      });
    }
    parts.push("</g>");
  }
  const why = flow.stages.filter((s) => s.kind === "action").map((s) => `${s.name}: ${s.why}`).join("; ");
  figure.innerHTML = `<figcaption>${escape(flow.app)}</figcaption>` +
    `<svg viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img"` +
    ` aria-label="operator graph of ${escape(flow.app)}"><title>${escape(why)}</title>${parts.join("")}</svg>`;
}

function short(text, most) {
  return text.length > most ? `${text.slice(0, most - 1)}…` : text;
}

// A plan's simulated latency (quantile against milliseconds) with its SLO as a vertical line,
// and its coarse-grained baselines' p99 beside it.
function distribution(container, plan) {
  const points = plan.report?.latency_ms ?? [];
  if (!points.length) {
    container.textContent = "the plan file holds no simulated distribution (re-run `headway plan`)";
    return;
  }
  const w = 440, h = 200, left = 46, bottom = 26, top = 8, right = 10;
  const slo = plan.slo_ms;
  const xmax = niceMax(Math.max(slo, ...points.map(([, ms]) => ms)) * 1.05);
  const px = (ms) => left + (ms / xmax) * (w - left - right);
  const py = (q) => top + (1 - q / 100) * (h - top - bottom);
  const d = points.map(([q, ms], i) => `${i ? "L" : "M"}${px(ms).toFixed(1)},${py(q).toFixed(1)}`).join("");
  const parts = [`<path class="line" d="${d}" fill="none" stroke="${PALETTE[0]}" data-key="plan"/>`,
    `<text class="axis" x="${px(plan.p99_ms) + 8}" y="${py(99) + 12}" fill="${PALETTE[0]}">plan p99 ${format(plan.p99_ms, " ms")}</text>`,
    `<line class="slo" x1="${px(slo)}" x2="${px(slo)}" y1="${top}" y2="${h - bottom}"/>`,
    `<text class="axis" x="${px(slo) + 4}" y="${top + 10}">SLO ${format(slo, " ms")}</text>`];
  for (const q of [0, 50, 99, 100]) {
    parts.push(`<line class="grid" x1="${left}" x2="${w - right}" y1="${py(q)}" y2="${py(q)}"/>`,
      `<text class="axis" x="${left - 4}" y="${py(q) + 4}" text-anchor="end">p${q}</text>`);
  }
  for (const [ms, anchor] of [[0, "start"], [xmax / 2, "middle"], [xmax, "end"]]) {
    parts.push(`<text class="axis" x="${px(ms)}" y="${h - 8}" text-anchor="${anchor}">${format(ms, " ms")}</text>`);
  }
  Object.entries(plan.report?.baselines ?? {}).forEach(([name, b], i) => {
    if (b.p99_ms === undefined) return;
    const colour = PALETTE[i + 1];
    parts.push(`<circle cx="${px(Math.min(b.p99_ms, xmax))}" cy="${py(99)}" r="4" fill="${colour}"/>`,
      `<text class="axis" x="${px(Math.min(b.p99_ms, xmax)) + 8}" y="${py(99) + 24 + 11 * i}" fill="${colour}">${escape(label(name))} p99 ${format(b.p99_ms, " ms")}</text>`);
  });
  container.innerHTML = `<figure class="chart"><figcaption>simulated latency of the plan</figcaption>` +
    `<svg viewBox="0 0 ${w} ${h}" role="img" aria-label="simulated latency distribution">${parts.join("")}</svg></figure>`;
}

function label(name) {
  return { cg_mean: "CG-Mean", cg_peak: "CG-Peak" }[name] ?? name;
}
