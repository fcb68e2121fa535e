"""PyTorch side of `cargo xtask bench`: davda54/sam's SAM on the same shapes, on the CPU.

Times a base step (SGD), SAM's floor (two forward/backward passes, one SGD step) and a SAM
step (the algorithm of https://github.com/davda54/sam, written out below) for each model of
the Rust benchmark, with as many threads as the machine has cores, and prints one JSON object:
{"<model>": {"base_ms": .., "two_passes_ms": .., "sam_ms": .., "sam_over_base": ..,
"sam_over_two_passes": ..}, ...}.
"""

import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SAM(torch.optim.Optimizer):
    """davda54/sam's SAM (rho, adaptive), over a base optimizer class."""

    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)

    @torch.no_grad()
    def second_step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()

    def _grad_norm(self):
        device = self.param_groups[0]["params"][0].device
        return torch.norm(
            torch.stack([
                ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(device)
                for group in self.param_groups
                for p in group["params"]
                if p.grad is not None
            ]),
            p=2,
        )


class Cnn(nn.Module):
    """The Rust benchmark's small CNN: conv 1->8 3x3, relu, conv 8->16 3x3, relu, avg-pool 2, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.linear = nn.Linear(16 * 12 * 12, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.linear(F.avg_pool2d(x, 2).flatten(1))


def mlp(sizes):
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def mean_ms(step, seconds=3.0):
    for _ in range(3):
        step()
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 10:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * sum(times) / len(times)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    models = {
        "mlp_100k": mlp([784, 128, 10]),
        "mlp_2m": mlp([784, 2048, 256, 10]),
        "cnn": Cnn(),
    }
    x = torch.randn(batch, 784)
    y = torch.randn(batch, 10)
    loss_fn = lambda model: ((model(x) - y) ** 2).mean()
    results = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    for name, model in models.items():
        base = torch.optim.SGD(model.parameters(), lr=1e-3)

        def base_step():
            base.zero_grad()
            loss_fn(model).backward()
            base.step()

        # SAM's floor, as in the Rust benchmark: the first pass's gradient is dropped.
        def two_passes_step():
            base.zero_grad()
            loss_fn(model).backward()
            base.zero_grad()
            loss_fn(model).backward()
            base.step()

        sam = SAM(model.parameters(), torch.optim.SGD, lr=1e-3)

        def sam_step():
            sam.zero_grad()
            loss_fn(model).backward()
            sam.first_step()
            sam.zero_grad()
            loss_fn(model).backward()
            sam.second_step()

        base_ms, two_ms, sam_ms = mean_ms(base_step), mean_ms(two_passes_step), mean_ms(sam_step)
        params = sum(p.numel() for p in model.parameters())
        results[name] = {
            "params": params,
            "base_ms": base_ms,
            "two_passes_ms": two_ms,
            "sam_ms": sam_ms,
            "sam_over_two_passes": sam_ms / two_ms,
            "sam_over_base": sam_ms / base_ms,
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
