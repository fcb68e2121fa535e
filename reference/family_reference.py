"""Reference trajectories of the SAM family for burn-sam's parity tests, in float64.

- LookSAM and Friendly-SAM: pytorch_optimizer 4.1.0's own classes (`pip install
  pytorch_optimizer==4.1.0`; older versions differ), with their global gradient norm kept in
  float64 (4.1.0 rounds it to float32; see `global_gradient_norm_f64`).
- GSAM: the authors' gsam.py (juntang-zhuang/GSAM) written out below: perturb along g, take
  g_p at w + e, step with g_p - alpha * (g - cos * ||g|| * g_p / (||g_p|| + eps)), where
  cos = <g, g_p> / (||g_p|| ||g|| + eps); rho follows the learning rate as its
  ProportionScheduler makes it. The weights are put back by copy (gsam.py subtracts e_w,
  which differs in the last bit).
- SAM perturbing only some parameters (SAM-ON): davda54/sam's rule over the chosen ones.

Writes tests/fixtures/family_reference.json. Weights are stored in Burn's layout. Run with
`cargo xtask reference` or `python3 reference/family_reference.py`.
"""

import importlib.metadata
import json
import pathlib

import pytorch_optimizer
import torch

from sam_reference import Mlp, params_burn_layout

torch.set_default_dtype(torch.float64)

PYTORCH_OPTIMIZER = importlib.metadata.version("pytorch_optimizer")
assert PYTORCH_OPTIMIZER == "4.1.0", f"pytorch_optimizer {PYTORCH_OPTIMIZER}: install 4.1.0"


def global_gradient_norm_f64(param_groups, device=None, *, weight_adaptive=False):
    """pytorch_optimizer's `get_global_gradient_norm` (the squared global norm, `|w| * g`
    for adaptive groups), kept in the gradients' float type: 4.1.0 rounds it to float32
    even for float64 parameters, a 1e-8 relative error that would hide every other
    difference from a 1e-10 comparison."""
    squares = [
        ((p.grad * p.abs()) if weight_adaptive and group.get("adaptive", False) else p.grad).norm() ** 2
        for group in param_groups
        for p in group["params"]
        if p.grad is not None
    ]
    return torch.stack(squares).sum().reshape(1)


pytorch_optimizer.optimizer.sam.get_global_gradient_norm = global_gradient_norm_f64


class Gsam(torch.optim.Optimizer):
    """gsam.py's step, with `rho` given per step."""

    def __init__(self, params, base_optimizer, alpha, eps=1e-12, **kwargs):
        super().__init__(params, dict(**kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.alpha = alpha
        self.eps = eps

    def _params(self):
        return [p for g in self.param_groups for p in g["params"] if p.grad is not None]

    @torch.no_grad()
    def first_step(self, rho):
        norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in self._params()]), p=2)
        scale = rho / (norm + self.eps)
        for p in self._params():
            self.state[p]["old_g"] = p.grad.clone()
            self.state[p]["old_p"] = p.data.clone()
            p.add_(p.grad * scale)
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        params = self._params()
        inner = sum(torch.sum(self.state[p]["old_g"] * p.grad) for p in params)
        new_norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in params]), p=2)
        old_norm = torch.norm(torch.stack([self.state[p]["old_g"].norm(p=2) for p in params]), p=2)
        cosine = inner / (new_norm * old_norm + self.eps)
        for p in params:
            vertical = self.state[p]["old_g"] - cosine * old_norm * p.grad / (new_norm + self.eps)
            p.grad.add_(vertical, alpha=-self.alpha)
            p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()


class PickedSam(torch.optim.Optimizer):
    """davda54/sam's SAM, perturbing only the parameters in `picked` (norm over those)."""

    def __init__(self, params, picked, base_optimizer, rho, **kwargs):
        super().__init__(params, dict(**kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.picked = picked
        self.rho = rho

    @torch.no_grad()
    def first_step(self):
        picked = [p for p in self.picked if p.grad is not None]
        norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in picked]), p=2)
        for p in picked:
            self.state[p]["old_p"] = p.data.clone()
            p.add_(p.grad * (self.rho / (norm + 1e-12)))
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        for p in self.picked:
            if "old_p" in self.state[p]:
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()


def problem(seed, steps, sizes=(4, 8, 3), batch=5):
    gen = torch.Generator().manual_seed(seed)
    model = Mlp(list(sizes))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    xs = torch.randn(steps, batch, sizes[0], generator=gen)
    ys = torch.randn(steps, batch, sizes[-1], generator=gen)
    return model, xs, ys


def base_class(optimizer):
    return {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[optimizer]


def case(name, variant, optimizer, options, rho, lrs, seed, schedule=None, perturb_only=None):
    """`variant`: {"kind": "gsam"|"looksam"|"fsam"|"sam", ...}; `lrs`: the learning rate of
    each step; `schedule`: (lr_min, lr_max, rho_min) with `rho` at lr_max."""
    steps = len(lrs)
    model, xs, ys = problem(seed, steps)
    base = base_class(optimizer)
    kind = variant["kind"]
    if kind == "gsam":
        optim = Gsam(model.parameters(), base, alpha=variant["alpha"], **options)
    elif kind == "looksam":
        optim = pytorch_optimizer.LookSAM(
            model.parameters(), base, rho=rho, k=variant["k"], alpha=variant["alpha"], **options
        )
    elif kind == "fsam":
        optim = pytorch_optimizer.FriendlySAM(
            model.parameters(), base, rho=rho, sigma=variant["sigma"], lmbda=variant["lambda"],
            **options,
        )
    elif kind == "sam":
        layer = model.layers[int(perturb_only[0].split(".")[1])]
        optim = PickedSam(model.parameters(), list(layer.parameters()), base, rho=rho, **options)
    else:
        raise ValueError(kind)
    init = params_burn_layout(model)
    trajectory = []
    closure_calls = 0
    for step, lr in enumerate(lrs):
        for group in optim.param_groups:
            group["lr"] = lr
        loss_fn = lambda: ((model(xs[step]) - ys[step]) ** 2).mean()
        optim.zero_grad()
        loss_fn().backward()
        if kind == "gsam":
            if schedule is None:
                rho_t = rho
            else:
                lr_min, lr_max, rho_min = schedule
                rho_t = rho_min + (rho - rho_min) * (lr - lr_min) / (lr_max - lr_min)
            optim.first_step(rho_t)
            loss_fn().backward()
            optim.second_step()
        elif kind == "sam":
            optim.first_step()
            loss_fn().backward()
            optim.second_step()
        else:

            def closure():
                nonlocal closure_calls
                closure_calls += 1
                optim.zero_grad()
                loss = loss_fn()
                loss.backward()
                return loss

            optim.step(closure)
        trajectory.append(params_burn_layout(model))
    return {
        "name": name,
        "variant": variant,
        "sizes": list(model_sizes(model)),
        "optimizer": optimizer,
        "options": options,
        "rho": rho,
        "schedule": schedule,
        "perturb_only": perturb_only,
        "lrs": lrs,
        "init": init,
        "x": xs.flatten().tolist(),
        "y": ys.flatten().tolist(),
        "batch": xs.shape[1],
        "trajectory": trajectory,
        # pytorch_optimizer's LookSAM runs the closure (a second pass) on every step.
        "closure_calls": closure_calls,
    }


def model_sizes(model):
    return [model.layers[0].in_features] + [layer.out_features for layer in model.layers]


def main():
    constant = lambda lr, n: [lr] * n
    decaying = [0.1 * (1 - step / 8) for step in range(8)]
    cases = [
        case("gsam_sgd", {"kind": "gsam", "alpha": 0.4}, "sgd", {}, 0.1, constant(0.1, 6), seed=10),
        case(
            "gsam_schedule_sgd_momentum", {"kind": "gsam", "alpha": 0.01}, "sgd",
            {"momentum": 0.9}, 0.1, decaying, seed=11, schedule=(0.0, 0.1, 0.02),
        ),
        case(
            "looksam_sgd", {"kind": "looksam", "k": 3, "alpha": 0.7}, "sgd", {}, 0.1,
            constant(0.1, 8), seed=12,
        ),
        case(
            "looksam_sgd_momentum", {"kind": "looksam", "k": 2, "alpha": 0.5}, "sgd",
            {"momentum": 0.9}, 0.05, constant(0.05, 7), seed=13,
        ),
        case(
            "fsam_sgd", {"kind": "fsam", "sigma": 1.0, "lambda": 0.9}, "sgd", {}, 0.05,
            constant(0.1, 6), seed=14,
        ),
        case(
            "fsam_sgd_momentum", {"kind": "fsam", "sigma": 0.5, "lambda": 0.6}, "sgd",
            {"momentum": 0.9}, 0.1, constant(0.05, 6), seed=15,
        ),
        case(
            "sam_picked_sgd", {"kind": "sam"}, "sgd", {}, 0.2, constant(0.1, 6), seed=16,
            perturb_only=["layers.1"],
        ),
    ]
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "family_reference.json"
    path.write_text(
        json.dumps(
            {"torch": torch.__version__, "pytorch_optimizer": PYTORCH_OPTIMIZER, "cases": cases}
        )
        + "\n"
    )
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
