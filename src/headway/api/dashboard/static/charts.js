// Time-series charts in plain SVG: one <figure> per chart, redrawn whole on each update.
// Every line's <path> carries what it drew, so a test (or a curious operator) can read it:
// data-key (group/entity/figure), data-values (the drawn values, JSON), data-counts (for a
// rate: the count in each interval it was drawn from); the <svg> carries its axes' domains
// (data-x0, data-x1, data-y0, data-y1) and its plot area (data-left, -top, -width, -height).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#3366cc", "#dc6b19", "#2e9e5b", "#c2185b", "#7b57c5", "#8d6e3f",
  "#00838f", "#d4a017", "#5c6bc0", "#e35d6a", "#6d8b2f", "#a0522d"];
const W = 420, H = 170, LEFT = 46, RIGHT = 8, TOP = 8, BOTTOM = 22;

const colours = new Map();
function colour(name) {
  if (!colours.has(name)) colours.set(name, PALETTE[colours.size % PALETTE.length]);
  return colours.get(name);
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function format(value, unit) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)}${unit ?? ""}`;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

// `spec`: {id, title, unit, times: [t], window: seconds shown, lines: [{label, key, colour,
// values: [v|null], counts?: [n|null], dash?}], stacked?: bool, max?: fixed y maximum}
function lineChart(container, spec) {
  let figure = container.querySelector(`figure[data-chart="${spec.id}"]`);
  if (!figure) {
    figure = document.createElement("figure");
    figure.className = "chart";
    figure.dataset.chart = spec.id;
    container.appendChild(figure);
  }
  const times = spec.times;
  const x1 = times.length ? times[times.length - 1] : Date.now() / 1000;
  // the range asked for, or the history there is when shorter (a minute at least)
  const span = Math.min(spec.window, Math.max(60, times.length ? x1 - times[0] : 0));
  const x0 = x1 - span;
  const first = times.findIndex((t) => t >= x0);
  const from = first < 0 ? times.length : first;
  const lines = spec.lines.map((line) => ({ ...line, shown: line.values.slice(from) }));
  const shownTimes = times.slice(from);
  let tops = shownTimes.map(() => 0);
  if (spec.stacked) {
    for (const line of lines) {
      line.base = tops;
      tops = tops.map((top, i) => top + (line.shown[i] ?? 0));
      line.top = tops;
    }
  }
  let peak = 0;
  for (const line of lines) for (const v of spec.stacked ? line.top : line.shown) if (v > peak) peak = v;
  const y1 = spec.max ?? niceMax(peak);
  const plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
  const px = (t) => LEFT + ((t - x0) / span) * plotW;
  const py = (v) => TOP + plotH - (Math.min(v, y1) / y1) * plotH;
  const parts = [];
  for (const tick of [0, 0.5, 1]) {
    const y = py(tick * y1);
    parts.push(`<line class="grid" x1="${LEFT}" x2="${W - RIGHT}" y1="${y}" y2="${y}"/>`,
      `<text class="axis" x="${LEFT - 4}" y="${y + 4}" text-anchor="end">${format(tick * y1)}</text>`);
  }
  for (const t of [x0, x0 + span / 2, x1]) {
    const anchor = t === x0 ? "start" : t === x1 ? "end" : "middle";
    parts.push(`<text class="axis" x="${px(t)}" y="${H - 6}" text-anchor="${anchor}">${clock(t)}</text>`);
  }
  for (const line of lines) {
    const d = [];
    let pen = "M";
    line.shown.forEach((v, i) => {
      if (v === null || v === undefined) { pen = "M"; return; }
      d.push(`${pen}${px(shownTimes[i]).toFixed(1)},${py(spec.stacked ? line.top[i] : v).toFixed(1)}`);
      pen = "L";
    });
    if (spec.stacked && d.length) {  // the band between this line and the one below
      const back = [];
      for (let i = line.shown.length - 1; i >= 0; i--) {
        if (line.shown[i] !== null) back.push(`L${px(shownTimes[i]).toFixed(1)},${py(line.base[i]).toFixed(1)}`);
      }
      d.push(...back, "Z");
    }
    const style = spec.stacked
      ? `fill="${line.colour}" fill-opacity="0.55" stroke="${line.colour}"`
      : `fill="none" stroke="${line.colour}"${line.dash ? ' stroke-dasharray="4 3"' : ""}`;
    const counts = line.counts ? ` data-counts='${JSON.stringify(line.counts.slice(from))}'` : "";
    parts.push(`<path class="line" d="${d.join("")}" ${style} data-key="${escape(line.key)}"` +
      ` data-values='${JSON.stringify(line.shown)}'${counts}/>`);
  }
  parts.push(`<line class="cursor" x1="0" x2="0" y1="${TOP}" y2="${TOP + plotH}" visibility="hidden"/>`);
  const legend = lines.map((line) => {
    const last = [...line.shown].reverse().find((v) => v !== null && v !== undefined);
    return `<li><span class="swatch${line.dash ? " dashed" : ""}" style="--c:${line.colour}"></span>` +
      `${escape(line.label)} <b>${format(last, spec.unit)}</b></li>`;
  }).join("");
  figure.innerHTML = `<figcaption>${escape(spec.title)}</figcaption>` +
    `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${escape(spec.title)}"` +
    ` data-x0="${x0}" data-x1="${x1}" data-y0="0" data-y1="${y1}" data-left="${LEFT}"` +
    ` data-top="${TOP}" data-width="${plotW}" data-height="${plotH}">${parts.join("")}</svg>` +
    `<ul class="legend">${legend || "<li>no figures yet</li>"}</ul>`;
  hover(figure.querySelector("svg"), lines, shownTimes, px, spec.unit);
}

// A vertical cursor and each line's value at the sample under the pointer.
function hover(svg, lines, times, px, unit) {
  const cursor = svg.querySelector(".cursor");
  const tip = document.getElementById("tip");
  svg.addEventListener("mousemove", (event) => {
    if (!times.length) return;
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * W;
    let best = 0;
    times.forEach((t, i) => { if (Math.abs(px(t) - x) < Math.abs(px(times[best]) - x)) best = i; });
    cursor.setAttribute("x1", px(times[best]));
    cursor.setAttribute("x2", px(times[best]));
    cursor.setAttribute("visibility", "visible");
    tip.innerHTML = `<b>${clock(times[best])}</b>` + lines.map((line) =>
      `<div><span class="swatch" style="--c:${line.colour}"></span>${escape(line.label)} ${format(line.shown[best], unit)}</div>`).join("");
    tip.style.left = `${event.pageX + 12}px`;
    tip.style.top = `${event.pageY + 12}px`;
    tip.hidden = false;
  });
  svg.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); tip.hidden = true; });
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
