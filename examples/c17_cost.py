"""C17: "GPUs are cost-effective per computation; cloud GPUs democratize access."
Cost of whole training runs at a price per GPU-hour (gpusim.cost: price x devices x simulated time):
* ResNet-50, 90 epochs of ImageNet-1k (1,281,167 training images);
* GPT-2 Large (774M parameters) on 20 tokens per parameter (the compute-optimal ratio of Hoffmann et al., 2022).
Prices: the descriptions' on-demand cloud prices (H100 SXM5 and PCIe; sources in their YAML files).  For the Xeon
8480 the script does not assume a price: it computes the break-even price per hour at which a CPU server
would cost the same per run as the H100, which is the number to hold against any CPU cloud quote."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.cost import price_of, run_cost  # noqa: E402

IMAGENET_TRAIN_IMAGES = 1_281_167
RESNET_EPOCHS = 90
GPT2_LARGE_PARAMETERS = 774e6
TOKENS_PER_PARAMETER = 20
PRICED = ("h100_sxm5_80gb", "h100_pcie_80gb")
CPU = "xeon_8480"


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    train_tokens = GPT2_LARGE_PARAMETERS * TOKENS_PER_PARAMETER
    gpt_ov = [] if not quick else ["config.num_layers=36"]  # GPT-2 Large has 36 layers: quick mode runs it whole
    runs = {}
    for hw in PRICED + (CPU,):
        desc, rn = C.run(hw, "resnet50_train")
        _, gp = C.run(hw, "gpt2_large_train", *gpt_ov)
        price = price_of(desc)
        row = {"price_usd_per_hour": price * 3600 if price else None,
               "resnet_hours": RESNET_EPOCHS * IMAGENET_TRAIN_IMAGES / rn.samples_per_s / 3600,
               "gpt2_hours": train_tokens / gp.tokens_per_s / 3600}
        if price:
            rc = run_cost(rn, price, epoch_samples=IMAGENET_TRAIN_IMAGES)
            gc = run_cost(gp, price, train_tokens=train_tokens)
            row |= {"resnet_usd": rc.epoch_usd * RESNET_EPOCHS, "gpt2_usd": gc.training_usd,
                    "gpt2_tokens_per_usd": gc.tokens_per_usd}
        runs[hw] = row
    ref = runs["h100_sxm5_80gb"]
    cpu = runs[CPU]
    # the price per hour at which the CPU run costs as much as the H100 run
    cpu["break_even_usd_per_hour_resnet"] = ref["resnet_usd"] / cpu["resnet_hours"]
    cpu["break_even_usd_per_hour_gpt2"] = ref["gpt2_usd"] / cpu["gpt2_hours"]
    print(f"{'':<23} | {'ResNet-50, 90 epochs':>18} | GPT-2 Large, {train_tokens / 1e9:.1f}B tokens")
    print(f"{'device':<16} {'$/h':>6} | {'hours':>8} {'USD':>9} | {'hours':>8} {'USD':>9}")
    for hw, r in runs.items():
        price = f"{r['price_usd_per_hour']:6.2f}" if r["price_usd_per_hour"] else "     -"
        usd_r = f"{r['resnet_usd']:9,.0f}" if "resnet_usd" in r else "        -"
        usd_g = f"{r['gpt2_usd']:9,.0f}" if "gpt2_usd" in r else "        -"
        print(f"{hw:<16} {price} | {r['resnet_hours']:8,.1f} {usd_r} | {r['gpt2_hours']:8,.1f} {usd_g}")
    print(f"a {CPU} server breaks even with the H100 SXM5 at ${cpu['break_even_usd_per_hour_resnet']:.2f}/h (ResNet-50) "
          f"and ${cpu['break_even_usd_per_hour_gpt2']:.2f}/h (GPT-2 Large) per socket")

    labels = ["ResNet-50 90 epochs", "GPT-2 Large 20 tok/param"]
    C.bar_chart(out_dir / "c17_cost.png", "C17: training-run time per device (hours, log)", labels,
                {hw: [runs[hw]["resnet_hours"], runs[hw]["gpt2_hours"]] for hw in runs}, "hours", "run", log=True)
    speed_r = cpu["resnet_hours"] / ref["resnet_hours"]
    speed_g = cpu["gpt2_hours"] / ref["gpt2_hours"]
    text = (f"on an H100 SXM5 at ${ref['price_usd_per_hour']:.2f}/h ResNet-50 (90 epochs) costs ${ref['resnet_usd']:,.0f} "
            f"in {ref['resnet_hours']:.1f} h and GPT-2 Large (15.5B tokens) ${ref['gpt2_usd']:,.0f} in "
            f"{ref['gpt2_hours']:.0f} h; a Xeon 8480 socket takes {speed_r:.0f}x / {speed_g:.0f}x longer, so it is "
            f"cheaper per run only below ${cpu['break_even_usd_per_hour_resnet']:.2f} / "
            f"${cpu['break_even_usd_per_hour_gpt2']:.2f} per hour")
    ok = cpu["break_even_usd_per_hour_gpt2"] < ref["price_usd_per_hour"] and ref["resnet_usd"] < 1000
    return {"runs": runs, "train_tokens": train_tokens, "cpu_slowdown_resnet": speed_r, "cpu_slowdown_gpt2": speed_g,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
