"""Roofline arithmetic (achieved bandwidth and throughput against a device peak) and the plot."""
from __future__ import annotations

from pathlib import Path

from ascendtile.bench.peaks import DevicePeak


def roofline_metrics(bytes_moved: int, flops: int, seconds: float, peak: DevicePeak) -> dict[str, float]:
    """Achieved GB/s and TFLOP/s of one timed call, each as a fraction of the device peak, and
    `roofline_frac`: the roofline's lower bound on the time (bytes at peak bandwidth or FLOPs at
    peak throughput, whichever is slower) divided by the measured time. 1.0 is at the roof."""
    gbps = bytes_moved / seconds / 1e9
    tflops = flops / seconds / 1e12
    bound_s = max(bytes_moved / (peak.hbm_gbps * 1e9), flops / (peak.matrix_tflops * 1e12))
    return {
        "gbps": gbps,
        "tflops": tflops,
        "intensity": flops / bytes_moved if bytes_moved else 0.0,
        "bw_frac": gbps / peak.hbm_gbps,
        "compute_frac": tflops / peak.matrix_tflops,
        "roofline_frac": bound_s / seconds,
    }


def plot_roofline(rows: list[dict], peak: DevicePeak, path: Path) -> None:
    """Log-log roofline: attainable GFLOP/s = min(peak compute, intensity x peak bandwidth), with
    one marker per measured case (filled: ours; hollow: the vendor baseline), coloured by family."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI machines
    import matplotlib.pyplot as plt

    intensities = [r["intensity"] for r in rows if r["intensity"] > 0] or [1.0]
    lo, hi = min(intensities) / 4, max(max(intensities) * 4, 2 * peak.matrix_tflops * 1e3 / peak.hbm_gbps)
    xs = [lo * (hi / lo) ** (i / 199) for i in range(200)]
    roof = [min(peak.matrix_tflops * 1e3, x * peak.hbm_gbps) for x in xs]

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.plot(xs, roof, color="black", linewidth=1.5, label=f"roof: {peak.hbm_gbps:,.0f} GB/s, {peak.matrix_tflops:,.2f} TFLOP/s")
    families = sorted({r["family"] for r in rows})
    palette = plt.get_cmap("tab20").colors  # 11 op families: more than tab10's colours
    colours = {fam: palette[i % len(palette)] for i, fam in enumerate(families)}
    for fam in families:
        mine = [r for r in rows if r["family"] == fam and r["intensity"] > 0]
        ax.scatter([r["intensity"] for r in mine], [r["tflops"] * 1e3 for r in mine], color=colours[fam], label=fam, s=22)
        base = [r for r in mine if r.get("baseline_tflops")]
        ax.scatter([r["intensity"] for r in base], [r["baseline_tflops"] * 1e3 for r in base],
                   facecolors="none", edgecolors=colours[fam], s=30)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"ascendtile kernels on {peak.name} ({peak.source} peak)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
