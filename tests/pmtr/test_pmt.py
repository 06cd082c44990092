"""The proxy match transform: orthogonality identities, a brute-force layer, rigid-motion invariance."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from zoo.errors import ZooError
from zoo.pmtr.pmt import CoarsePMTBlock, FinePMTBlock, ProxyMatchTransform, neighbor_sum, orthogonality_loss
from zoo.pmtr.geometry import radius_neighbors


def _rigid(seed):
    from scipy.spatial.transform import Rotation

    r = torch.tensor(Rotation.random(random_state=seed).as_matrix())
    return r, torch.randn(3, dtype=torch.float64)


def contract(layer, y):
    """[s, f, c, h] -> [s, o, c, h]: sum_f y[s, f, c, h] P[h, f, o] (the paper's proxy contraction, unfused)."""
    return torch.einsum("sfch,hfo->soch", y, layer.proxy)


def project(layer, x, linear):
    """The official order, X'[s, o, c, h] = sum_f (x W_h)[s, f, c] P[h, f, o] (the blocks fold it with the merge)."""
    return contract(layer, layer.channel(x, linear))


def merge(layer, x, linear):
    """The official head merge: a Linear on the (c h) channels of X''."""
    return linear(x.reshape(x.shape[0], x.shape[1], layer.c_out * layer.heads))


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
    out = project(layer, x, layer.w_src).detach().numpy()
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


def _dense_coarse(blk, src_pos, trg_pos, src_feat, trg_feat):
    """The official coarse block's order: X' = (x W) P, then a softmax over *all* nodes of MLP(dist) with
    dist > radius masked to -inf (an (n, n, h) matrix), then the head merge."""
    def agg(x, mlp, d):
        att = mlp(d.unsqueeze(-1)).masked_fill((d > blk.radius).unsqueeze(-1), float("-inf")).softmax(dim=1)
        return torch.einsum("sjh,jfch->sfch", att, x)

    d_s, d_t = torch.cdist(src_pos, src_pos), torch.cdist(trg_pos, trg_pos)
    s = torch.nn.functional.normalize(src_feat.reshape(-1, blk.f[0], blk.c[0]), dim=-1)
    t = torch.nn.functional.normalize(trg_feat.reshape(-1, blk.f[0], blk.c[0]), dim=-1)
    for layer, a_s, a_t, norm in zip(blk.layers, blk.att_src, blk.att_trg, blk.norms):
        s = merge(layer, agg(project(layer, s, layer.w_src), a_s, d_s), layer.out_src)
        t = merge(layer, agg(project(layer, t, layer.w_trg), a_t, d_t), layer.out_trg)
        s, t = blk.act(norm(s)), blk.act(norm(t))
    return blk.out(s.reshape(s.shape[0], -1)), blk.out(t.reshape(t.shape[0], -1))


def test_sparse_coarse_block_equals_the_dense_masked_one_values_and_gradients():
    torch.manual_seed(1)
    blk = CoarsePMTBlock(c=[4, 3, 2], f=[2, 4, 3], heads=[2, 3], radius=0.35).double()
    src, trg = torch.rand(40, 3, dtype=torch.float64), torch.rand(31, 3, dtype=torch.float64)
    counts = (torch.cdist(src, src) <= 0.35).sum(1)
    assert counts.min() < counts.max() < 40  # ragged lists, padded: the sparse path is really exercised
    fs, ft = torch.randn(40, 8, dtype=torch.float64), torch.randn(31, 8, dtype=torch.float64)
    grads = []
    for fn in (blk, lambda *a: _dense_coarse(blk, *a)):
        blk.zero_grad()
        a, b = fn(src, trg, fs, ft)
        ((a ** 2).sum() + (b ** 3).sum()).backward()
        grads.append((a.detach(), b.detach(), [p.grad.clone() for p in blk.parameters()]))
    (a, b, g), (a_ref, b_ref, g_ref) = grads
    # float64; only the summation order differs (GroupNorm over 2-4 entries amplifies its rounding)
    torch.testing.assert_close(a, a_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(b, b_ref, rtol=1e-10, atol=1e-10)
    for u, v in zip(g, g_ref):
        torch.testing.assert_close(u, v, rtol=1e-9, atol=1e-9)


def test_neighbor_sum_is_the_padded_gather_and_passes_gradcheck():
    torch.manual_seed(5)
    x = torch.randn(7, 5, 2, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 3, 7], [1, 7, 7], [6, 2, 4], [5, 5, 0]])  # 7 = padding
    w = torch.rand(4, 3, 2, dtype=torch.float64, requires_grad=True)
    ref = (w.unsqueeze(2) * torch.cat([x, torch.zeros_like(x[:1])])[idx]).sum(1)
    torch.testing.assert_close(neighbor_sum(w, x, idx), ref, rtol=0, atol=1e-14)
    assert torch.autograd.gradcheck(lambda w_, x_: neighbor_sum(w_, x_, idx), (w, x))


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


def _dense_fine(blk, feat, pts, nb, n_src):
    """The official fine block's order: X' = (x W) P of each cloud, gathered over the neighbour lists."""
    n = len(pts)
    pad = nb >= n
    sq = (pts.unsqueeze(1) - torch.cat([pts, torch.zeros_like(pts[:1])])[nb]).pow(2).sum(-1, keepdim=True)
    x = torch.nn.functional.normalize(feat.reshape(n, blk.f[0], blk.c[0]), dim=-1)
    parts = (slice(0, n_src), slice(n_src, n))
    for layer, a_s, a_t, norm in zip(blk.layers, blk.att_src, blk.att_trg, blk.norms):
        proj = torch.cat([project(layer, x[parts[0]], layer.w_src), project(layer, x[parts[1]], layer.w_trg)])
        proj = torch.cat([proj, torch.zeros_like(proj[:1])])
        out = []
        for part, mlp, out_linear in ((parts[0], a_s, layer.out_src), (parts[1], a_t, layer.out_trg)):
            att = mlp(sq[part]).masked_fill(pad[part].unsqueeze(-1), float("-inf")).softmax(dim=1)
            out.append(merge(layer, torch.einsum("sah,safch->sfch", att, proj[nb[part]]), out_linear))
        x = blk.act(norm(torch.cat(out)))
    return x.reshape(n, -1)


def test_fine_block_is_invariant_to_rigid_motions_and_equals_the_gathered_form():
    torch.manual_seed(3)
    blk = FinePMTBlock(c=[4, 2, 2], f=[2, 4, 4], heads=[2, 2]).double()
    pts = torch.rand(12, 3, dtype=torch.float64)
    nb = torch.cat([radius_neighbors(pts[:5], pts[:5], 0.6, 4), radius_neighbors(pts[5:], pts[5:], 0.6, 4) + 5])
    nb[:5][nb[:5] == 5] = 12
    nb[5:][nb[5:] == 12] = 12
    assert (nb == 12).any()
    feat = torch.randn(12, 8, dtype=torch.float64)
    r, t = _rigid(4)
    a, b = blk(feat, pts, nb, (5, 7)), blk(feat, pts @ r.T + t, nb, (5, 7))
    assert a.shape == (12, 8)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(a, _dense_fine(blk, feat, pts, nb, 5), rtol=1e-12, atol=1e-12)


def test_bad_widths_are_refused():
    with pytest.raises(ZooError, match="same length"):
        CoarsePMTBlock(c=[4, 2], f=[2, 4, 4], heads=[2])
    blk = CoarsePMTBlock(c=[4, 2], f=[2, 4], heads=[2])
    with pytest.raises(ZooError, match="8-d node features"):
        blk(torch.rand(3, 3), torch.rand(3, 3), torch.rand(3, 6), torch.rand(3, 6))


def test_merge_before_contraction_equals_the_official_order():
    torch.manual_seed(6)
    layer = ProxyMatchTransform(c_in=3, f_in=2, c_out=4, f_out=5, heads=3).double()
    y = torch.randn(6, 2, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(layer.contract_merge(y, layer.out_src), merge(layer, contract(layer, y), layer.out_src),
                               rtol=1e-12, atol=1e-12)


def test_recomputing_coarse_block_equals_plain_autograd_values_and_every_gradient():
    """recompute=True (_ProxyChain + checkpoints, the model's default) against recompute=False (plain autograd over
    the same weights): outputs and the gradients of the features, the positions and every parameter, float64."""
    import copy

    torch.manual_seed(7)
    lean = CoarsePMTBlock(c=[4, 3, 2], f=[2, 4, 3], heads=[2, 3], radius=0.35).double()
    plain = copy.deepcopy(lean)
    plain.recompute = False
    pts = [torch.rand(n, 3, dtype=torch.float64, requires_grad=True) for n in (40, 31)]
    feats = [torch.randn(n, 8, dtype=torch.float64, requires_grad=True) for n in (40, 31)]
    out = []
    for blk in (lean, plain):
        a, b = blk(*pts, *feats)
        grads = torch.autograd.grad((a ** 2).sum() + (b ** 3).sum(), [*pts, *feats, *blk.parameters()])
        out.append(([a, b], grads))
    (y, g), (y_ref, g_ref) = out
    for u, v in zip(y, y_ref):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    names = ["src_pos", "trg_pos", "src_feat", "trg_feat"] + [n for n, _ in lean.named_parameters()]
    for name, u, v in zip(names, g, g_ref, strict=True):
        # the gradients really flow (a zero on both sides would pass trivially), except where the math makes them
        # zero: the head-merge bias (constant over f, removed by the GroupNorm that follows) and the distance MLP's
        # biases (a shift common to all neighbours, removed by the softmax)
        if not (name.endswith(("out_src.bias", "out_trg.bias")) or name.startswith("att_")) or "weight" in name:
            assert u.abs().max() > 1e-6, name
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-10)


def test_proxy_chain_passes_gradcheck_on_padded_lists():
    from zoo.pmtr.pmt import _ProxyChain

    torch.manual_seed(8)
    n, f, ci, h, k, o = 5, 2, 3, 2, 3, 4
    idx = torch.tensor([[0, 3, 5], [1, 5, 5], [2, 4, 0], [3, 3, 1], [4, 0, 5]])  # 5 = padding
    args = [torch.randn(n, f, ci), torch.randn(h, ci, k), torch.randn(h, k), torch.rand(n, 3, h), idx,
            torch.randn(h, f, o), torch.randn(k)]
    args = [a if a.dtype == torch.long else a.double().requires_grad_() for a in args]
    assert torch.autograd.gradcheck(_ProxyChain.apply, tuple(args))
    x, wm, bwm, att, _, proxy, bias = args  # against the gathered form: the padded slot is a zero row
    u = torch.einsum("nfi,hik->nfkh", x, wm) + bwm.t()
    gathered = torch.cat([u, torch.zeros_like(u[:1])])[idx]  # (n, K, f, k, h)
    ref = torch.einsum("njh,njfkh,hfo->nko", att, gathered, proxy) + bias[:, None]
    torch.testing.assert_close(_ProxyChain.apply(*args), ref, rtol=1e-12, atol=1e-12)
