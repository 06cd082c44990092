"""The proxy match transform: orthogonality identities, a brute-force layer, rigid-motion invariance."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from zoo.errors import ZooError
from zoo.pmtr.pmt import CoarsePMTBlock, FinePMTBlock, ProxyMatchTransform, orthogonality_loss
from zoo.pmtr.geometry import radius_neighbors


def _rigid(seed):
    from scipy.spatial.transform import Rotation

    r = torch.tensor(Rotation.random(random_state=seed).as_matrix())
    return r, torch.randn(3, dtype=torch.float64)


def test_orthogonal_square_proxy_gives_zero_loss_and_keeps_inner_products():
    q = torch.tensor(ortho_group.rvs(6, random_state=0))
    orth, zero = orthogonality_loss([q[None]])
    assert float(orth) == pytest.approx(0, abs=1e-24) and float(zero) == 0
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randn(7, 6, dtype=torch.float64)
    torch.testing.assert_close((x @ q) @ (y @ q).t(), x @ y.t(), rtol=0, atol=1e-12)


def test_heads_on_disjoint_orthonormal_blocks_give_zero_loss_and_random_proxies_match_brute_force():
    q = torch.tensor(ortho_group.rvs(8, random_state=1))  # rows orthonormal: P_h = rows of head h's block, (4, 8)
    p = torch.stack([q[:4], q[4:]])  # (h=2, f=4, f'=8): P_h P_h^T = I, P_1 P_2^T = 0
    orth, zero = orthogonality_loss([p])
    assert float(orth) == pytest.approx(0, abs=1e-24) and float(zero) == pytest.approx(0, abs=1e-24)
    rnd = [torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(2, 2, 3, dtype=torch.float64)]
    o_ref, z_ref = [], []
    for r in rnd:
        h, f = r.shape[:2]
        o_ref.append(np.mean([((r[i].numpy() @ r[i].numpy().T - np.eye(f)) ** 2).mean() for i in range(h)]))
        z_ref.append(np.mean([((r[i] @ r[j].T) ** 2).numpy() for i in range(h) for j in range(h) if i != j]))
    orth, zero = orthogonality_loss(rnd)
    assert float(orth) == pytest.approx(10 * np.mean(o_ref), rel=1e-12)
    assert float(zero) == pytest.approx(10 * np.mean(z_ref), rel=1e-12)


def test_pmt_projection_matches_loops():
    torch.manual_seed(0)
    layer = ProxyMatchTransform(c_in=3, f_in=2, c_out=4, f_out=5, heads=2).double()
    x = torch.randn(3, 2, 3, dtype=torch.float64)
    out = layer.project(x, layer.w_src).detach().numpy()
    w, b = layer.w_src.weight.detach().numpy(), layer.w_src.bias.detach().numpy()
    p = layer.proxy.detach().numpy()
    ref = np.zeros((3, 5, 4, 2))
    for s in range(3):
        lin = x[s].numpy() @ w.T + b  # (f, c_out*h), channel index c*h + h_
        for o in range(5):
            for c in range(4):
                for h in range(2):
                    ref[s, o, c, h] = sum(lin[f, c * 2 + h] * p[h, f, o] for f in range(2))
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_coarse_aggregation_masks_beyond_radius_like_loops():
    torch.manual_seed(1)
    blk = CoarsePMTBlock(c=[2, 2], f=[2, 2], heads=[1], radius=0.6).double()
    pos = torch.rand(6, 3, dtype=torch.float64)
    x = torch.randn(6, 2, 2, 1, dtype=torch.float64)
    d = torch.cdist(pos, pos)
    got = blk._aggregate(x, blk.att_src[0], d)
    for s in range(6):
        logits = torch.stack([blk.att_src[0](d[s, j].reshape(1, 1))[0, 0] for j in range(6)])
        keep = d[s] <= 0.6
        w = torch.softmax(logits[keep], 0)
        torch.testing.assert_close(got[s], (w[:, None, None, None] * x[keep]).sum(0), rtol=1e-12, atol=1e-12)


def test_coarse_block_is_invariant_to_rigid_motions_of_the_positions():
    torch.manual_seed(2)
    blk = CoarsePMTBlock(c=[4, 2, 2], f=[2, 4, 4], heads=[2, 2], radius=0.5).double()
    src, trg = torch.rand(9, 3, dtype=torch.float64), torch.rand(7, 3, dtype=torch.float64)
    fs, ft = torch.randn(9, 8, dtype=torch.float64), torch.randn(7, 8, dtype=torch.float64)
    a = blk(src, trg, fs, ft)
    (r1, t1), (r2, t2) = _rigid(0), _rigid(1)
    b = blk(src @ r1.T + t1, trg @ r2.T + t2, fs, ft)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(a[0], blk(src * 1.7, trg, fs, ft)[0])  # a non-rigid change does matter


def test_fine_block_is_invariant_to_rigid_motions_and_keeps_the_width():
    torch.manual_seed(3)
    blk = FinePMTBlock(c=[4, 2, 2], f=[2, 4, 4], heads=[2, 2]).double()
    pts = torch.rand(12, 3, dtype=torch.float64)
    nb = torch.cat([radius_neighbors(pts[:5], pts[:5], 0.6, 4), radius_neighbors(pts[5:], pts[5:], 0.6, 4) + 5])
    nb[:5][nb[:5] == 5] = 12
    nb[5:][nb[5:] == 12] = 12
    feat = torch.randn(12, 8, dtype=torch.float64)
    r, t = _rigid(4)
    a, b = blk(feat, pts, nb, (5, 7)), blk(feat, pts @ r.T + t, nb, (5, 7))
    assert a.shape == (12, 8)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_bad_widths_are_refused():
    with pytest.raises(ZooError, match="same length"):
        CoarsePMTBlock(c=[4, 2], f=[2, 4, 4], heads=[2])
    blk = CoarsePMTBlock(c=[4, 2], f=[2, 4], heads=[2])
    with pytest.raises(ZooError, match="8-d node features"):
        blk(torch.rand(3, 3), torch.rand(3, 3), torch.rand(3, 6), torch.rand(3, 6))
