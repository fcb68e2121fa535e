"""Reference trajectories of AE-SAM (Jiang et al., ICLR 2023) for burn-sam's parity tests, in
float64: `SamSchedule::Adaptive`'s rule written out from the paper, over davda54/sam's SAM.

Each step takes the gradient g at w and its squared norm x = ||g||^2 (over every parameter),
updates the running statistics (from 0)

    mean <- decay * mean + (1 - decay) * x
    var  <- decay * var  + (1 - decay) * (x - mean)^2

and takes a SAM step when x >= mean + c_t * sqrt(var), where c_t moves linearly from
`threshold_start` at step 0 to `threshold_end` at step `steps` (then stays); otherwise it steps
the base optimizer with g (one pass). Records the weights after each step and which steps were
SAM steps.

Writes tests/fixtures/schedule_reference.json. Weights are stored in Burn's layout. Run with
`cargo xtask reference` or `python3 reference/schedule_reference.py`.
"""

import json
import pathlib

import torch

from sam_reference import Mlp, Sam, params_burn_layout

torch.set_default_dtype(torch.float64)


def case(name, options, rho, schedule, steps=12, seed=0):
    sizes = [4, 8, 3]
    batch = 5
    gen = torch.Generator().manual_seed(seed)
    model = Mlp(sizes)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    xs = torch.randn(steps, batch, sizes[0], generator=gen)
    ys = torch.randn(steps, batch, sizes[-1], generator=gen)
    sam = Sam(model.parameters(), torch.optim.SGD, rho=rho, adaptive=False, eta=0.0, **options)
    init = params_burn_layout(model)
    mean, var = 0.0, 0.0
    trajectory, sam_steps = [], []
    for step in range(steps):
        loss_fn = lambda: ((model(xs[step]) - ys[step]) ** 2).mean()
        loss_fn().backward()
        x = sum(float(p.grad.pow(2).sum()) for p in model.parameters())
        mean = schedule["decay"] * mean + (1 - schedule["decay"]) * x
        var = schedule["decay"] * var + (1 - schedule["decay"]) * (x - mean) ** 2
        progress = min(step / schedule["steps"], 1.0)
        c = schedule["threshold_start"] + (schedule["threshold_end"] - schedule["threshold_start"]) * progress
        is_sam = x >= mean + c * var**0.5
        if is_sam:
            sam.first_step()
            loss_fn().backward()
            sam.second_step()
        else:
            sam.base_optimizer.step()
            sam.zero_grad()
        sam_steps.append(is_sam)
        trajectory.append(params_burn_layout(model))
    return {
        "name": name,
        "sizes": sizes,
        "options": options,
        "rho": rho,
        "schedule": schedule,
        "init": init,
        "x": xs.flatten().tolist(),
        "y": ys.flatten().tolist(),
        "batch": batch,
        "sam_steps": sam_steps,
        "trajectory": trajectory,
    }


def main():
    paper = {"decay": 0.9, "threshold_start": 1.0, "threshold_end": -1.0, "steps": 12}
    cases = [
        case("adaptive_sgd", {"lr": 0.05}, rho=0.1, schedule=paper, seed=1),
        case("adaptive_sgd_momentum", {"lr": 0.05, "momentum": 0.9}, rho=0.1, schedule=dict(paper, decay=0.5, steps=6)),
    ]
    for c in cases:
        assert 0 < sum(c["sam_steps"]) < len(c["sam_steps"]), f"{c['name']}: both kinds of step"
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "schedule_reference.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}: SAM steps {[sum(c['sam_steps']) for c in cases]}")


if __name__ == "__main__":
    main()
