"""Reference trajectories of Momentum-SAM (Becker, Altrock, Risse, arXiv 2401.12033) for
burn-sam's parity tests, in float64, in plain Python (no framework): the method as the
authors' code runs it, written out step by step.

With `v_0 = 0` and a radius `rho`, step t:
- the gradient `g_t` is taken at `w~_t = w_t - rho * v_t / (||v_t|| + 1e-12)` (the norm global
  over all parameters; `w~_0 = w_0`);
- the base optimizer steps `w_t` with `g_t`, and the momentum direction becomes
  `v_{t+1} = mu * v_t + g_t`.
SGD flavour: the base is SGD with momentum `mu` (no dampening), so `w_{t+1} = w_t - lr *
v_{t+1}`; or, where a case says so, SGD with another momentum `base_momentum` (0: plain SGD),
while `v` keeps decaying by `mu`: the look-ahead then follows another average of the gradients
than the base optimizer's step. AdamW flavour: the base is AdamW, and `mu = beta_1` (`v` is then Adam's first moment
over `1 - beta_1`: the same direction). Weight decay, where a case has it, is the base
optimizer's, taken at `w` (burn-sam's choice; the authors' SGD decays at `w~`, their AdamW
after the Adam update).

Hyperparameters that Burn keeps in f32 are exact in f32 (AdamW's beta_1 = 0.5, beta_2 = 0.75,
eps = 2^-27, whose bias corrections Burn computes in f32; weight decays 2^-6 and 2^-4).

The model is burn-sam-suite's `Mlp`: linear layers with tanh between them, and the loss the
mean squared error. Writes tests/fixtures/momentum_sam_reference.json, weights in Burn's
layout (`[in, out]`); each step records `w_{t+1}` and `w~_{t+1}`.
"""

import json
import math
import pathlib
import random


def matmul(a, b):
    """[n, k] x [k, m]."""
    return [[sum(a[i][p] * b[p][j] for p in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def forward_backward(params, sizes, x, y):
    """The loss's gradient by parameter (weights [in][out], biases [out])."""
    layers = len(sizes) - 1
    activations = [x]
    pre = []
    h = x
    for layer in range(layers):
        w, b = params[2 * layer], params[2 * layer + 1]
        z = [[value + b[j] for j, value in enumerate(row)] for row in matmul(h, w)]
        pre.append(z)
        h = [[math.tanh(v) for v in row] for row in z] if layer + 1 < layers else z
        activations.append(h)
    n = len(y) * len(y[0])
    delta = [[2.0 * (h[i][j] - y[i][j]) / n for j in range(len(y[0]))] for i in range(len(y))]
    grads = [None] * len(params)
    for layer in reversed(range(layers)):
        inputs = activations[layer]
        grads[2 * layer] = [
            [sum(inputs[r][i] * delta[r][j] for r in range(len(inputs))) for j in range(len(delta[0]))]
            for i in range(len(inputs[0]))
        ]
        grads[2 * layer + 1] = [sum(delta[r][j] for r in range(len(delta))) for j in range(len(delta[0]))]
        if layer > 0:
            w = params[2 * layer]
            back = [[sum(delta[r][j] * w[i][j] for j in range(len(delta[0]))) for i in range(len(w))] for r in range(len(delta))]
            z = pre[layer - 1]
            delta = [[back[r][i] * (1.0 - math.tanh(z[r][i]) ** 2) for i in range(len(back[0]))] for r in range(len(back))]
    return grads


def flat(tensor):
    return [v for row in tensor for v in row] if isinstance(tensor[0], list) else list(tensor)


def shaped(values, like):
    if isinstance(like[0], list):
        cols = len(like[0])
        return [values[i * cols:(i + 1) * cols] for i in range(len(like))]
    return list(values)


def momentum_sam(name, flavour, rho, lr, steps=8, weight_decay=0.0, seed=0, mu=None, base_momentum=None):
    sizes = [4, 8, 3]
    batch = 5
    rng = random.Random(seed)
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        params.append([[rng.gauss(0.0, 0.5) for _ in range(d_out)] for _ in range(d_in)])
        params.append([rng.gauss(0.0, 0.5) for _ in range(d_out)])
    xs = [[[rng.gauss(0.0, 1.0) for _ in range(sizes[0])] for _ in range(batch)] for _ in range(steps)]
    ys = [[[rng.gauss(0.0, 1.0) for _ in range(sizes[-1])] for _ in range(batch)] for _ in range(steps)]
    init = [flat(p) for p in params]

    w = [flat(p) for p in params]
    if flavour == "sgd":
        mu = 0.9 if mu is None else mu
        base = mu if base_momentum is None else base_momentum
        options = {"momentum": base, "weight_decay": weight_decay, "mu": mu}
    else:
        mu, beta_2, eps = 0.5, 0.75, 2.0 ** -27
        options = {"beta_1": mu, "beta_2": beta_2, "eps": eps, "weight_decay": weight_decay}
        m1 = [[0.0] * len(p) for p in w]
        m2 = [[0.0] * len(p) for p in w]
    v = [[0.0] * len(p) for p in w]
    velocity = [[0.0] * len(p) for p in w]
    perturbed = [list(p) for p in w]
    trajectory = []
    for t in range(steps):
        grads = forward_backward([shaped(p, like) for p, like in zip(perturbed, params)], sizes, xs[t], ys[t])
        g = [flat(grad) for grad in grads]
        # The base step from w.
        if flavour == "sgd":
            for p in range(len(w)):
                for i in range(len(w[p])):
                    grad = w[p][i] * weight_decay + g[p][i] if weight_decay else g[p][i]
                    velocity[p][i] = grad if t == 0 else grad + velocity[p][i] * base
                    w[p][i] = w[p][i] - velocity[p][i] * lr
        else:
            step = t + 1
            for p in range(len(w)):
                for i in range(len(w[p])):
                    grad = g[p][i]
                    if t == 0:
                        m1[p][i] = grad * (1.0 - mu)
                        m2[p][i] = grad * grad * (1.0 - beta_2)
                    else:
                        m1[p][i] = m1[p][i] * mu + grad * (1.0 - mu)
                        m2[p][i] = m2[p][i] * beta_2 + grad * grad * (1.0 - beta_2)
                    corrected_1 = m1[p][i] / (1.0 - mu ** step)
                    corrected_2 = m2[p][i] / (1.0 - beta_2 ** step)
                    delta = corrected_1 / (math.sqrt(corrected_2) + eps)
                    decayed = w[p][i] * (1.0 - lr * weight_decay) if weight_decay else w[p][i]
                    w[p][i] = decayed - delta * lr
        # The momentum direction, then the next perturbed point.
        for p in range(len(v)):
            for i in range(len(v[p])):
                v[p][i] = g[p][i] if t == 0 else v[p][i] * mu + g[p][i]
        norm = math.sqrt(sum(value * value for p in v for value in p))
        scale = rho / (norm + 1e-12)
        perturbed = [[w[p][i] - v[p][i] * scale for i in range(len(w[p]))] for p in range(len(w))]
        trajectory.append({"weights": [list(p) for p in w], "perturbed": [list(p) for p in perturbed]})
    return {
        "name": name,
        "flavour": flavour,
        "sizes": sizes,
        "rho": rho,
        "lr": lr,
        "options": options,
        "init": init,
        "x": [value for step in xs for row in step for value in row],
        "y": [value for step in ys for row in step for value in row],
        "batch": batch,
        "trajectory": trajectory,
    }


def main():
    cases = [
        momentum_sam("sgd", "sgd", rho=0.3, lr=0.1),
        momentum_sam("sgd_large_rho", "sgd", rho=2.0, lr=0.05, seed=1),
        momentum_sam("sgd_weight_decay", "sgd", rho=0.5, lr=0.1, weight_decay=2.0 ** -6, seed=2),
        momentum_sam("sgd_mu_half", "sgd", rho=0.5, lr=0.1, seed=5, mu=0.5, base_momentum=0.9),
        momentum_sam("sgd_plain_base", "sgd", rho=0.5, lr=0.1, seed=6, mu=0.9, base_momentum=0.0),
        momentum_sam("adamw", "adamw", rho=0.5, lr=0.01, seed=3),
        momentum_sam("adamw_weight_decay", "adamw", rho=1.0, lr=0.01, weight_decay=2.0 ** -4, seed=4),
    ]
    out = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/momentum_sam_reference.json"
    out.write_text(json.dumps({"method": "Momentum-SAM, SGD and AdamW flavours, float64", "cases": cases}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
