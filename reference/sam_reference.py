"""Reference trajectories for burn-sam's parity tests, computed with PyTorch.

Implements davda54/sam's SAM/ASAM update (first_step / second_step) in float64 and records
whole parameter trajectories for small MLPs. Writes tests/fixtures/sam_reference.json.
Weights are stored in Burn's layout ([d_in, d_out]); PyTorch's Linear is [d_out, d_in].

Run with `cargo xtask reference` or `python3 reference/sam_reference.py`.
"""

import json
import pathlib

import torch

torch.set_default_dtype(torch.float64)


class Sam(torch.optim.Optimizer):
    """davda54/sam's algorithm: e = rho * (w^2 if adaptive) * g / (||a*g|| + 1e-12)."""

    def __init__(self, params, base_optimizer, rho, adaptive, eta, **kwargs):
        super().__init__(params, dict(rho=rho, adaptive=adaptive, eta=eta, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)

    def _weight(self, p, group):
        return (p.abs() + group["eta"]) if group["adaptive"] else 1.0

    @torch.no_grad()
    def first_step(self):
        norm = torch.norm(
            torch.stack(
                [
                    (self._weight(p, g) * p.grad).norm(p=2)
                    for g in self.param_groups
                    for p in g["params"]
                    if p.grad is not None
                ]
            ),
            p=2,
        )
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                p.add_(self._weight(p, group) ** 2 * p.grad * scale)
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()


class Mlp(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])
        )

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


def params_burn_layout(model):
    out = []
    for layer in model.layers:
        out.append(layer.weight.detach().t().contiguous().flatten().tolist())
        out.append(layer.bias.detach().flatten().tolist())
    return out


def case(name, optimizer, options, rho, adaptive=False, eta=0.0, steps=6, seed=0):
    sizes = [4, 8, 3]
    batch = 5
    gen = torch.Generator().manual_seed(seed)
    model = Mlp(sizes)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    xs = torch.randn(steps, batch, sizes[0], generator=gen)
    ys = torch.randn(steps, batch, sizes[-1], generator=gen)
    base = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[optimizer]
    sam = Sam(model.parameters(), base, rho=rho, adaptive=adaptive, eta=eta, **options)
    init = params_burn_layout(model)
    trajectory = []
    for step in range(steps):
        loss_fn = lambda: ((model(xs[step]) - ys[step]) ** 2).mean()
        loss_fn().backward()
        sam.first_step()
        loss_fn().backward()
        sam.second_step()
        trajectory.append(params_burn_layout(model))
    return {
        "name": name,
        "sizes": sizes,
        "optimizer": optimizer,
        "options": options,
        "rho": rho,
        "adaptive": adaptive,
        "eta": eta,
        "init": init,
        "x": xs.flatten().tolist(),
        "y": ys.flatten().tolist(),
        "batch": batch,
        "trajectory": trajectory,
    }


def main():
    cases = [
        case("sam_sgd", "sgd", {"lr": 0.1}, rho=0.05),
        case("sam_sgd_momentum", "sgd", {"lr": 0.05, "momentum": 0.9}, rho=0.1, seed=1),
        case("asam_sgd", "sgd", {"lr": 0.1}, rho=0.5, adaptive=True, eta=0.0, seed=2),
        case("asam_eta_sgd", "sgd", {"lr": 0.1}, rho=0.5, adaptive=True, eta=0.01, seed=3),
        case("sam_adam", "adam", {"lr": 0.01, "eps": 1e-8}, rho=0.05, seed=4),
    ]
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sam_reference.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
