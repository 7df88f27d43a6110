"""The evidence page's figures, drawn with matplotlib from the experiments' summaries."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

COLOURS = {"headway": "#1b6ca8", "clipper": "#c8553d", "exp3": "#1b6ca8", "exp4": "#2a9d8f"}
MODEL_COLOURS = ("#1b6ca8", "#e9a03b", "#7a7a7a", "#2a9d8f", "#c8553d", "#6a4c93", "#8ab17d")


def _save(fig: Any, path: Path, note: str) -> Path:
    width = int(fig.get_figwidth() * 19)  # characters of 6-point text across the figure
    lines = textwrap.wrap(note, width)
    fig.text(0.005, 0.005, "\n".join(lines), fontsize=6, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.012 + 0.12 * len(lines) / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _band(
    ax: Any, x: np.ndarray, band: dict[str, list[float]], colour: str, label: str, style: str = "-"
) -> None:
    ax.plot(x, band["median"], style, color=colour, label=label, linewidth=1.4)
    ax.fill_between(x, band["p25"], band["p75"], color=colour, alpha=0.18, linewidth=0)


# -- Clipper ----------------------------------------------------------------------------------


def ensemble(data: dict[str, Any], path: Path, note: str) -> Path:
    rows = data["rows"]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    pools = list(dict.fromkeys(r["pool"] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(pools)
    for j, pool in enumerate(pools):
        for i, dataset in enumerate(datasets):
            margins = [
                100 * r["margin"] for r in rows if r["dataset"] == dataset and r["pool"] == pool
            ]
            x = i + (j - (len(pools) - 1) / 2) * width
            jitter = np.linspace(-width / 4, width / 4, len(margins))
            ax.scatter(x + jitter, margins, s=10, color=MODEL_COLOURS[j], alpha=0.55,
                       label=pool if i == 0 else None)  # fmt: skip
            ax.hlines(
                np.median(margins),
                x - width / 2.5,
                x + width / 2.5,
                color=MODEL_COLOURS[j],
                linewidth=2.2,
            )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(datasets)), datasets)
    ax.set_ylabel("Exp4 accuracy - best member's\n(percentage points)")
    ax.set_title("Exp4 ensemble vs its best single member, per seed (bar: median)")
    ax.legend(title="members", fontsize=8, title_fontsize=8, loc="upper right")
    return _save(fig, path, note)


def recovery(data: dict[str, Any], path: Path, note: str) -> Path:
    variants = data["variants"]
    etas = sorted({v["eta"] for v in variants})
    fig, axes = plt.subplots(3, len(etas), figsize=(9, 7.5), sharex=True, squeeze=False)
    for col, eta in enumerate(etas):
        for row, policy in enumerate(("exp3", "exp4")):
            ax = axes[row][col]
            v = next(v for v in variants if v["policy"] == policy and v["eta"] == eta)
            for k, (model, band) in enumerate(v["share"].items()):
                x = np.arange(len(band["median"])) * data["step"]
                label = model + (" (degrades)" if model == "logreg" else "")
                _band(ax, x, band, MODEL_COLOURS[k], label)
            ax.axvline(data["at"], color="black", linestyle="--", linewidth=0.8)
            what = "share of the last 100 choices" if policy == "exp3" else "weight share"
            ax.set_title(f"{policy.capitalize()}, η = {eta:g}: {what}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            if col == 0:
                ax.set_ylabel("selected share")
        ax = axes[2][col]
        for policy in ("exp3", "exp4"):
            v = next(v for v in variants if v["policy"] == policy and v["eta"] == eta)
            x = np.arange(len(v["accuracy"]["median"])) * data["step"]
            _band(ax, x, v["accuracy"], COLOURS[policy], policy.capitalize())
        ax.axvline(data["at"], color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"accuracy of the answers (last 100), η = {eta:g}", fontsize=9)
        ax.set_xlabel("feedback events")
        if col == 0:
            ax.set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7, loc="center left")
    axes[2][0].legend(fontsize=7, loc="lower left")
    return _save(fig, path, note)


def personal(data: dict[str, Any], path: Path, note: str) -> Path:
    fig, ax = plt.subplots(figsize=(8, 3.8))
    styles = {True: "-", False: ":"}
    for v in data["variants"]:
        x = np.arange(len(v["accuracy"]["median"])) * data["step"]
        label = f"{v['policy'].capitalize()}, " + (
            "per user" if v["per_user"] else "one state for all"
        )
        _band(ax, x, v["accuracy"], COLOURS[v["policy"]], label, styles[v["per_user"]])
    groups = data["model_accuracy_by_group"]
    own = groups["plain-digits"][0]
    ax.axhline(own, color="#555555", linewidth=0.8, linestyle="--")
    ax.text(x[-1], own, " each group's specialist", fontsize=7, va="bottom", ha="right")
    ax.axhline(groups["both"][0], color="#999999", linewidth=0.8, linestyle="--")
    ax.text(
        x[-1],
        groups["both"][0],
        " one model trained on both groups",
        fontsize=7,
        va="top",
        ha="right",
    )
    ax.set_xlabel("feedback events (20 users, two groups)")
    ax.set_ylabel("accuracy (last 200 answers)")
    ax.set_title(f"Selection per user vs for everyone (η = {data['eta']:g})")
    ax.set_ylim(0.7, 1.0)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path, note)


def stragglers(data: dict[str, Any], path: Path, note: str) -> Path:
    rows = data["rows"]
    sizes = sorted({r["size"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    modes = [(None, COLOURS["clipper"], "wait for every member")]
    modes += [(slo, colour, f"answer at a {slo:g} ms deadline")
              for slo, colour in ((data["slo_ms"], COLOURS["headway"]),
                                  (data.get("tight_slo_ms"), COLOURS["exp4"])) if slo]  # fmt: skip
    for slo, colour, label in modes:

        def pick(key: str, slo: float | None = slo) -> tuple[list[float], list[float], list[float]]:
            med, lo, hi = [], [], []
            for s in sizes:
                vals = [r[key] for r in rows if r["size"] == s and r.get("slo_ms") == slo
                        and (r["deadline"] == (slo is not None))]  # fmt: skip
                med.append(float(np.median(vals)))
                lo.append(float(np.min(vals)))
                hi.append(float(np.max(vals)))
            return med, lo, hi

        med, lo, hi = pick("p99_ms")
        left.errorbar(sizes, med, yerr=[np.subtract(med, lo), np.subtract(hi, med)], marker="o",
                      color=colour, label=label, capsize=3)  # fmt: skip
        acc, alo, ahi = pick("accuracy")
        right.errorbar(sizes, [100 * a for a in acc], marker="o", color=colour, label=label, capsize=3,
                       yerr=[100 * np.subtract(acc, alo), 100 * np.subtract(ahi, acc)])  # fmt: skip
        if slo is not None:
            miss, _, _ = pick("missing")
            left.annotate(f"{100 * min(miss):.1f}-{100 * max(miss):.1f}% of members missing",
                          (sizes[-1], slo), fontsize=7, textcoords="offset points", xytext=(0, 4),
                          ha="right", color=colour)  # fmt: skip
        left.axhline(slo or data["slo_ms"], color="#999999", linestyle=":", linewidth=0.6)
    left.set_xlabel("ensemble size (members)")
    left.set_ylabel("P99 latency (ms)")
    left.set_title("P99 latency of the ensemble's answer", fontsize=9)
    left.legend(fontsize=7, loc="upper left")
    right.set_xlabel("ensemble size (members)")
    right.set_ylabel("accuracy (%)")
    right.set_title("accuracy of the answers (median, min-max over seeds)", fontsize=9)
    right.legend(fontsize=7, loc="lower right")
    return _save(fig, path, note)


def batching(data: dict[str, Any], path: Path, note: str) -> Path:
    models = data["models"]
    cols = 4
    rows = -(-len(models) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.9 * rows), squeeze=False)
    caps = data["caps"]
    for ax, (name, m) in zip(axes.flat, models.items(), strict=False):
        served = [m["served"][f"b{c}"]["throughput_rps"] for c in caps]
        rounds = [
            m["served"][f"b{c}"].get("throughput_rounds", [v])
            for c, v in zip(caps, served, strict=True)
        ]
        spread = [
            np.subtract(served, [min(r) for r in rounds]),
            np.subtract([max(r) for r in rounds], served),
        ]
        alone = [m["alone_rows_per_s"][str(c)] for c in caps]
        ax.errorbar(caps, served, yerr=spread, fmt="o-", capsize=3, color=COLOURS["headway"],
                    label="served (req/s; median, min-max of rounds)")  # fmt: skip
        ax.plot(caps, alone, "--", color="#999999", label="model alone (rows/s)")
        adaptive = m["served"]["slo20"]
        if adaptive["mean_batch"]:
            ax.plot([adaptive["mean_batch"]], [adaptive["throughput_rps"]], "*", markersize=12,
                    color=COLOURS["clipper"], label="20 ms SLO, cap 64: its choice")  # fmt: skip
        pairs = zip(m["served"][f"b{caps[-1]}"].get("throughput_rounds", [served[-1]]),
                    m["served"]["b1"].get("throughput_rounds", [served[0]]), strict=False)  # fmt: skip
        gain = float(np.median([a / b for a, b in pairs if b]))
        ax.set_title(f"{name} ({m['framework']}): {gain:.1f}x", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(caps, [str(c) for c in caps], fontsize=7)
        ax.set_xlabel("max batch size (1 = no batching)", fontsize=8)
    spare = list(axes.flat)[len(models) :]
    for ax in spare[1:]:
        ax.axis("off")
    if spare:  # the gain of batching per round (cap 64 over no batching, the same round)
        ax = spare[0]
        names = list(models)
        gains = [[a / b for a, b in zip(models[n]["served"][f"b{caps[-1]}"].get("throughput_rounds", []),
                                         models[n]["served"]["b1"].get("throughput_rounds", []), strict=False)]
                 for n in names]  # fmt: skip
        med = [float(np.median(g)) if g else np.nan for g in gains]
        ax.barh(range(len(names)), med, color=COLOURS["headway"],
                xerr=[np.subtract(med, [min(g) if g else np.nan for g in gains]),
                      np.subtract([max(g) if g else np.nan for g in gains], med)], capsize=2)  # fmt: skip
        ax.set_yticks(
            range(len(names)), [f"{n} ({models[n]['framework']})" for n in names], fontsize=6
        )
        ax.invert_yaxis()
        ax.set_xlabel(f"cap {caps[-1]} / no batching, per round", fontsize=8)
        ax.set_title("gain per round (median, min-max)", fontsize=8)
    axes[0][0].set_ylabel("throughput")
    axes[0][0].legend(fontsize=6, loc="upper left")
    return _save(fig, path, note)


# -- Cloudflow, InferLine, Clockwork ----------------------------------------------------------


def cloudflow(data: dict[str, Any], summary: dict[str, Any], path: Path, note: str) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, (key, _label) in enumerate((("fusion_throughput_ratio", "throughput, 32 conn."),
                                      ("fusion_p50_ratio", "p50 latency, 1 conn."))):  # fmt: skip
        vals = summary[key]
        left.scatter([i] * len(vals), vals, color=MODEL_COLOURS[i], s=18)
        left.hlines(np.median(vals), i - 0.2, i + 0.2, color=MODEL_COLOURS[i], linewidth=2)
        left.text(i + 0.22, np.median(vals), f"{np.median(vals):.2f}x", fontsize=8, va="center")
    left.set_xticks([0, 1], ["throughput\n32 connections", "p50 latency\n1 connection"])
    left.axhline(1, color="black", linewidth=0.8)
    left.set_ylabel("fused vs unfused (x better)")
    left.set_title("Operator fusion, per round", fontsize=9)
    comp = data["competitive"]
    k2 = [r["latency_ms"]["p99"] for r in comp["heavy-k2"]]
    k1 = [r["latency_ms"]["p99"] for r in comp["heavy-k1"]]
    for a, b in zip(k1, k2, strict=True):
        right.plot([0, 1], [a, b], color="#bbbbbb", linewidth=0.8)
    right.scatter([0] * len(k1), k1, color=COLOURS["clipper"], label="per round", s=18)
    right.scatter([1] * len(k2), k2, color=COLOURS["headway"], s=18)
    pooled = summary["compete_pooled_p99_ms"]
    right.scatter([0, 1], [pooled["heavy-k1"], pooled["heavy-k2"]], marker="_", s=600, color="black",
                  label="all rounds pooled")  # fmt: skip
    ideal = summary.get("compete_ideal_p99_ms")
    if ideal:
        right.scatter([0, 1], [ideal["heavy-k1"], ideal["heavy-k2"]], marker="_", s=600, color="#999999",
                      label="independent draws, no waiting")  # fmt: skip
    right.set_xticks([0, 1], ["k=1", "k=2 (compete)"])
    right.set_ylim(bottom=0)
    right.set_ylabel("p99 latency (ms)")
    right.set_title("Competitive execution, heavy-tailed operator", fontsize=9)
    right.legend(fontsize=7)
    return _save(fig, path, note)


SHORT = {"image-processing": "image proc.", "video-monitoring": "video mon.", "social-media": "social media",
         "tf-cascade": "TF cascade", "digits-cascade": "cascade", "digits-both": "both models"}  # fmt: skip


def _misses(ax: Any, cells: dict[str, list[dict[str, Any]]], names: list[str], title: str) -> None:
    x = np.arange(len(names))
    for j, (who, colour) in enumerate((("planner", COLOURS["headway"]), ("cg_mean", COLOURS["exp4"]),
                                       ("cg_peak", COLOURS["clipper"]))):  # fmt: skip
        misses = [
            [100 * r[who]["miss_rate"] for r in cells[n] if "miss_rate" in r.get(who, {})]
            for n in names
        ]
        med = [np.median(v) if v else np.nan for v in misses]
        hi = [max(v) - np.median(v) if v else 0 for v in misses]
        lo = [np.median(v) - min(v) if v else 0 for v in misses]
        ax.bar(x + (j - 1) * 0.27, med, 0.27, yerr=[lo, hi], color=colour, capsize=2,
               label={"planner": "planner", "cg_mean": "CG-Mean", "cg_peak": "CG-Peak"}[who])  # fmt: skip
    ax.set_xticks(x, names, fontsize=6)
    ax.set_ylabel("queries over the SLO (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def inferline(data: dict[str, Any], path: Path, note: str) -> Path:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), squeeze=False)
    for row, key in enumerate(("assumed", "measured")):
        cells: dict[str, list[dict[str, Any]]] = {}
        for r in data[key]:
            cells.setdefault(
                f"{SHORT.get(r['pipeline'], r['pipeline'])}\n{r['slo_ms']} ms\nCV {r['cv']:g}", []
            ).append(r)
        names = list(cells)
        x = np.arange(len(names))
        for j, (base, colour) in enumerate(
            (("cg_mean", COLOURS["exp4"]), ("cg_peak", COLOURS["clipper"]))
        ):
            ratios = [[r[base]["cost_per_hour"] / r["planner"]["cost_per_hour"] for r in cells[n]
                       if "cost_per_hour" in r.get(base, {}) and "cost_per_hour" in r["planner"]] for n in names]  # fmt: skip
            med = [np.median(v) if v else np.nan for v in ratios]
            lo = [np.median(v) - min(v) if v else 0 for v in ratios]
            hi = [max(v) - np.median(v) if v else 0 for v in ratios]
            axes[row][0].bar(x + (j - 0.5) * 0.38, med, 0.38, yerr=[lo, hi], color=colour, capsize=2,
                             label=f"{'CG-Mean' if base == 'cg_mean' else 'CG-Peak'} / planner")  # fmt: skip
        axes[row][0].axhline(1, color="black", linewidth=0.8)
        axes[row][0].set_xticks(x, names, fontsize=6)
        axes[row][0].set_ylabel("cost relative to the plan")
        what = "assumed GPU-like profiles" if key == "assumed" else "profiles measured here (CPU)"
        axes[row][0].set_title(f"{what}: cost (median, min-max over seeds)", fontsize=9)
        axes[row][0].legend(fontsize=7)
        if key == "assumed":
            _misses(
                axes[row][1], cells, names, "assumed profiles: SLO misses on the held-out trace"
            )
    ax = axes[1][1]
    table = data.get("measured_profiles_ms", {})
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for label, entry in table.items():
        model, kind, batch = label.split("|")
        series.setdefault((model, kind), []).append((int(batch), entry["mean_ms"]))
    for k, ((model, kind), points) in enumerate(sorted(series.items())):
        points.sort()
        ax.plot([b for b, _ in points], [v for _, v in points], "o-" if kind == "cpu1" else "s--",
                color=MODEL_COLOURS[k // 2], label=f"{model} on {kind}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({b for points in series.values() for b, _ in points})
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("mean time per batch (ms)")
    ax.set_title("the measured profiles: cpu1 = 1 thread, cpu2 = 2 threads", fontsize=9)
    if series:
        ax.legend(fontsize=7)
    return _save(fig, path, note)


def clockwork(data: dict[str, Any], path: Path, note: str) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    loads = data["loads"]

    for policy in ("headway", "clipper"):
        found = [[100.0 * r["slo_attainment"] for r in data["runs"] if r["policy"] == policy and r["load"] == load]
                 for load in loads]  # fmt: skip
        med = [float(np.median(v)) for v in found]
        left.errorbar([100 * f for f in loads], med, marker="o", capsize=3, color=COLOURS[policy],
                      yerr=[np.subtract(med, [min(v) for v in found]), np.subtract([max(v) for v in found], med)],
                      label="Headway" if policy == "headway" else "Clipper-style baseline")  # fmt: skip
        for load, m in zip(loads, med, strict=True):
            late = sum(
                r["late"] for r in data["runs"] if r["policy"] == policy and r["load"] == load
            )
            left.annotate(f"{late:,} late", (100 * load, m), fontsize=7, color=COLOURS[policy],
                          textcoords="offset points", xytext=(0, 6 if policy == "headway" else -12),
                          ha="center")  # fmt: skip
        for k, seed in enumerate(sorted({r["seed"] for r in data["runs"]})):
            runs = sorted((r for r in data["runs"] if r["policy"] == policy and r["seed"] == seed),
                          key=lambda r: r["load"])  # fmt: skip
            right.plot([r["offered_rps"] for r in runs], [r["goodput_rps"] for r in runs],
                       ("o-", "s--", "^:")[k % 3], color=COLOURS[policy],
                       label=f"{'Headway' if policy == 'headway' else 'baseline'}, trace {seed}")  # fmt: skip
    left.set_xlabel("offered load (% of Headway's capacity on that trace)")
    left.set_ylabel("requests answered within 100 ms (%)")
    left.set_title("SLO attainment (median, min-max over traces; late answers summed)", fontsize=8)
    left.set_ylim(-8, 110)
    left.legend(fontsize=7, loc="center left")
    right.set_xlabel("offered (requests/s)")
    right.set_ylabel("goodput (answers within 100 ms / s)")
    right.set_title("Goodput per trace (50%, 90%, 120% of its capacity)", fontsize=9)
    right.legend(fontsize=6)
    return _save(fig, path, note)
