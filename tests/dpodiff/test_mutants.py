"""Oracles added by mutation testing: Gumbel-max sampling of the learned prompt distribution draws option i with
probability softmax(α)_i (the Gumbel-max identity), tight enough to tell a sign error in the Gumbel noise apart:
argmax(α − G) instead of argmax(α + G) gives 0.79 instead of 0.71 for option 0 of α = (2, 0, 0, 0)."""

import torch

from zoo.dpodiff.relax import sample_choice


def test_gumbel_max_sampling_is_softmax_of_alpha_for_an_asymmetric_alpha():
    a = [torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=torch.float64)]
    g = torch.Generator().manual_seed(1)
    n = 20_000
    counts = torch.zeros(4, dtype=torch.float64)
    for _ in range(n):
        counts[sample_choice(a, generator=g)[0]] += 1
    # binomial standard error ≤ 0.0033 at n = 20,000: 0.015 is more than 4.5 of them
    torch.testing.assert_close(counts / n, torch.softmax(a[0], 0), atol=0.015, rtol=0)
