"""Reference trajectories of global-norm gradient clipping for burn-sam's parity tests.

`torch.nn.utils.clip_grad_norm_` on the gradient the base optimizer steps with, in float64:
- SAM (davda54/sam's algorithm, `sam_reference.Sam`): clipped once per step, the descent
  gradient (taken at w + e) after `first_step`, before `second_step`'s base step;
- with a loss scale, as users of PyTorch's AMP write it: the ascent's gradient unscaled by
  hand (SAM's norm must not see the scale), the descent's by `GradScaler.unscale_` before
  `clip_grad_norm_`, then `scaler.step` and `scaler.update` (one scale update per step);
- SAM over a window of two micro-batches, each loss divided by 2 before backward: the
  combined descent gradient is clipped once;
- no SAM: SGD with `GradScaler` and `clip_grad_norm_` (burn-sam's `LossScaled`).

Writes tests/fixtures/clip_reference.json (weights in Burn's layout). Run with
`cargo xtask reference` or `python3 reference/clip_reference.py`.
"""

import json
import pathlib

import torch

from sam_reference import Mlp, Sam, params_burn_layout

torch.set_default_dtype(torch.float64)


def case(name, max_norm, scale=None, sam=True, micro_batches=1, rho=0.1, steps=6, seed=0):
    sizes = [4, 8, 3]
    batch = 4
    lr, momentum = 0.1, 0.9
    gen = torch.Generator().manual_seed(seed)
    model = Mlp(sizes)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    rows = steps * micro_batches
    # Targets far from the outputs: gradients large enough for `max_norm` to clip most steps.
    xs = torch.randn(rows, batch, sizes[0], generator=gen)
    ys = torch.randn(rows, batch, sizes[-1], generator=gen) * 3.0
    if sam:
        optim = Sam(model.parameters(), torch.optim.SGD, rho=rho, adaptive=False, eta=0.0,
                    lr=lr, momentum=momentum)
        base = optim.base_optimizer
    else:
        optim = base = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    scaler = None
    if scale is not None:
        # No growth and no overflow within the run: the scale stays `scale`.
        scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=10**6)
    init = params_burn_layout(model)
    trajectory, norms = [], []

    def backward(step):
        for m in range(micro_batches):
            row = step * micro_batches + m
            loss = ((model(xs[row]) - ys[row]) ** 2).mean() / micro_batches
            (scaler.scale(loss) if scaler else loss).backward()

    for step in range(steps):
        if sam:
            backward(step)
            if scaler:
                with torch.no_grad():
                    for p in model.parameters():
                        p.grad /= scaler.get_scale()
            optim.first_step()
        backward(step)
        if scaler:
            scaler.unscale_(base)
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        norms.append(float(total))
        if sam:
            for p in model.parameters():
                p.data = optim.state[p]["old_p"]
        if scaler:
            scaler.step(base)
            scaler.update()
        else:
            base.step()
        optim.zero_grad()
        trajectory.append(params_burn_layout(model))
    return {
        "name": name,
        "sizes": sizes,
        "lr": lr,
        "momentum": momentum,
        "rho": rho if sam else 0.0,
        "sam": sam,
        "max_norm": max_norm,
        "scale": scale,
        "micro_batches": micro_batches,
        "init": init,
        "x": xs.flatten().tolist(),
        "y": ys.flatten().tolist(),
        "batch": batch,
        "norms": norms,
        "trajectory": trajectory,
    }


def main():
    cases = [
        # Limits within the norms' range: some steps clipped, some not.
        case("sam_clip", max_norm=4.0),
        case("sam_clip_scaled", max_norm=4.5, scale=1024.0, seed=1),
        case("sam_clip_accumulated", max_norm=3.0, micro_batches=2, seed=2),
        case("scaled_clip", max_norm=4.0, scale=1024.0, sam=False, seed=3),
    ]
    clipped = sum(n > c["max_norm"] for c in cases for n in c["norms"])
    total = sum(len(c["norms"]) for c in cases)
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "clip_reference.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}; {clipped} of {total} steps clipped")


if __name__ == "__main__":
    main()
