"""The authors' GPTQ, transcribed for the tests: IST-DASLab/gptq's ``GPTQ.fasterquant`` (gptq.py) and its quantizer
(quant.py: ``Quantizer.find_params`` for weights, per output row, symmetric; ``quantize``), line for line and slow.

Changes, each marked ``# LayerCut`` below:
* the grid is LayerCut's symmetric one: xmin = −xmax always (theirs keeps xmin = 0 for a row or group without a
  negative weight, halving its range) and an all-zero row's scale is torchao's epsilon (theirs: xmin, xmax = −1, 1;
  its integers are 0 either way);
* a weight's value is its integer times the scale as LayerCut stores it (int4: rounded to bfloat16);
* it also returns the integers q − zero and the scales it used (theirs writes only the values into the layer);
* the Hessian comes in as an argument (theirs accumulates 2/n · XXᵀ in ``add_batch``: a scale nothing depends on),
  and the Conv1D / Conv2d reshapes, timing, losses, prints and CUDA calls are left out.
The rounding is theirs, round(x / scale), unless ``divide`` is False: then torchao's, round(x · (1 / scale)), as
LayerCut rounds. Where the two differ (an x / scale within a rounding error of a half), the test counts a tie.
"""

from __future__ import annotations

import copy

import torch


class Quantizer:
    """quant.py's ``Quantizer`` configured ``bits``, ``perchannel=True, sym=True, mse=False``."""

    def __init__(self, bits: int, stored: torch.dtype, divide: bool):
        self.divide = divide  # LayerCut: False rounds as torchao does
        self.maxq = torch.tensor(2**bits - 1)
        self.stored = stored  # LayerCut
        self.eps = torch.finfo(torch.float32).eps if bits == 8 else torch.finfo(torch.float32).smallest_normal
        self.scale = torch.zeros(1)
        self.used = []  # LayerCut: every scale found, in order

    def find_params(self, x, weight=False):
        tmp = torch.zeros(x.shape[0])
        xmin = torch.minimum(x.min(1)[0], tmp)
        xmax = torch.maximum(x.max(1)[0], tmp)

        xmax = torch.maximum(torch.abs(xmin), xmax)
        xmin = -xmax  # LayerCut: theirs sets it only where xmin < 0
        tmp = (xmin == 0) & (xmax == 0)
        self.scale = (xmax - xmin) / self.maxq
        self.scale[tmp] = self.eps  # LayerCut: theirs, xmin, xmax = −1, +1
        self.zero = torch.full_like(self.scale, (self.maxq + 1) / 2)

        shape = [-1] + [1] * (len(x.shape) - 1)
        self.scale = self.scale.reshape(shape)
        self.zero = self.zero.reshape(shape)
        self.used.append(self.scale)

    def quantize(self, x):
        ratio = x / self.scale if self.divide else x * (1.0 / self.scale)  # LayerCut: either rounding
        q = torch.clamp(torch.round(ratio) + self.zero, 0, self.maxq)
        return self.scale.to(self.stored).float() * (q - self.zero), q - self.zero  # LayerCut: stored; integers

    def ready(self):
        return torch.all(self.scale != 0)


def fasterquant(weight, hessian, bits, stored, blocksize=128, percdamp=.01, groupsize=-1, actorder=False,
                static_groups=False, divide=True):
    """(integers [rows, columns], the scales used [rows, groups]) of ``weight`` by the authors' loop."""
    quantizer = Quantizer(bits, stored, divide)
    W = weight.clone().float()
    columns = W.shape[1]

    if not quantizer.ready():
        quantizer.find_params(W, weight=True)

    H = hessian.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    if static_groups:
        groups = []
        for i in range(0, columns, groupsize):
            found = copy.deepcopy(quantizer)
            found.find_params(W[:, i:(i + groupsize)], weight=True)
            groups.append(found)

    if actorder:
        perm = torch.argsort(torch.diag(H), descending=True)
        W = W[:, perm]
        H = H[perm][:, perm]
        invperm = torch.argsort(perm)

    Q = torch.zeros_like(W)
    Ints = torch.zeros_like(W)  # LayerCut

    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    H = torch.linalg.cholesky(H, upper=True)
    Hinv = H

    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1

        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Ints1 = torch.zeros_like(W1)  # LayerCut
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]

        for i in range(count):
            w = W1[:, i]
            d = Hinv1[i, i]

            if groupsize != -1:
                if not static_groups:
                    if (i1 + i) % groupsize == 0:
                        quantizer.find_params(W[:, (i1 + i):(i1 + i + groupsize)], weight=True)
                else:
                    idx = i1 + i
                    if actorder:
                        idx = perm[idx]
                    quantizer = groups[idx // groupsize]

            q, ints = quantizer.quantize(w.unsqueeze(1))
            q = q.flatten()
            Q1[:, i] = q
            Ints1[:, i] = ints.flatten()  # LayerCut

            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1

        Q[:, i1:i2] = Q1
        Ints[:, i1:i2] = Ints1  # LayerCut

        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])

    if actorder:
        Q = Q[:, invperm]
        Ints = Ints[:, invperm]  # LayerCut
    used = [g.used[-1] for g in groups] if static_groups else quantizer.used[-(columns // groupsize):] \
        if groupsize != -1 else quantizer.used
    return Ints.to(torch.int8), torch.cat(used, 1).to(stored).float()
