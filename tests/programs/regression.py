"""Fitting a polynomial with one Linear layer in the shape of the classic regression example:
features x, x^2, x^3, x^4 built with torch.cat, smooth_l1_loss, a hand-written update
`param.data.add_(-lr * param.grad)` until the loss is small, and the learned and actual
polynomials printed with `'{:+.2f}'.format(w)` over the weight's elements (0-d tensors).
float64; the batches are numpy draws."""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F

POLY_DEGREE = 4


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    result += "{:+.2f}".format(b[0])
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", required=True)
    parser.add_argument("--max-batches", type=int, default=150)
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(4)
    W_target = torch.from_numpy(rng.standard_normal((POLY_DEGREE, 1))) * 0.5
    b_target = torch.from_numpy(rng.standard_normal(1)) * 0.5

    def f(x):
        """Approximated function."""
        return x.mm(W_target) + b_target.item()

    def get_batch(batch_size=32):
        """Builds a batch i.e. (x, f(x)) pair."""
        random = torch.from_numpy(rng.standard_normal(batch_size))
        x = make_features(random)
        y = f(x)
        return x, y

    fc = torch.nn.Linear(W_target.size(0), 1)
    if os.path.exists(args.init):
        fc.load_state_dict(torch.load(args.init))
    else:
        torch.save(fc.state_dict(), args.init)

    for batch_idx in range(1, args.max_batches + 1):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            param.data.add_(-0.02 * param.grad)
        if batch_idx % 25 == 0:
            print(f"batch {batch_idx} loss {loss:.15e}")
        if loss < 1e-3:
            break

    print("Loss: {:.6e} after {} batches".format(loss, batch_idx))
    print("==> Learned function:\t" + poly_desc(fc.weight.view(-1), fc.bias))
    print("==> Actual function:\t" + poly_desc(W_target.view(-1), b_target))


if __name__ == "__main__":
    main()
