"""Reference loss-scale sequences from PyTorch's GradScaler update rule.

Feeds random overflow flags to `torch._amp_update_scale_` (what `GradScaler.update` calls)
and records the scale and growth tracker after every update. Writes
tests/fixtures/scaler_reference.json. Run with `cargo xtask reference`.
"""

import json
import pathlib

import torch


def sequence(name, steps, p_overflow, seed, init_scale=2.0**16, growth_factor=2.0,
             backoff_factor=0.5, growth_interval=2000):
    gen = torch.Generator().manual_seed(seed)
    flags = (torch.rand(steps, generator=gen) < p_overflow).tolist()
    scale = torch.full((), init_scale, dtype=torch.float32)
    tracker = torch.zeros((), dtype=torch.int32)
    scales, trackers = [], []
    for flag in flags:
        found_inf = torch.full((), 1.0 if flag else 0.0, dtype=torch.float32)
        torch._amp_update_scale_(scale, tracker, found_inf, growth_factor, backoff_factor,
                                 growth_interval)
        scales.append(scale.item())
        trackers.append(int(tracker.item()))
    return {
        "name": name,
        "init_scale": init_scale,
        "growth_factor": growth_factor,
        "backoff_factor": backoff_factor,
        "growth_interval": growth_interval,
        "overflows": flags,
        "scales": scales,
        "growth_trackers": trackers,
    }


def main():
    cases = [
        sequence("defaults", 6000, 0.0005, 0),
        sequence("busy", 3000, 0.15, 1, growth_interval=3),
        sequence("odd_factors", 3000, 0.1, 2, init_scale=1000.0, growth_factor=3.0,
                 backoff_factor=0.3, growth_interval=5),
        sequence("growth_to_overflow", 400, 0.0, 3, init_scale=2.0**100, growth_interval=2),
    ]
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "scaler_reference.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
