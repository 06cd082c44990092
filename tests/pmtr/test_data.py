"""Synthetic fractures (watertight, reassembled by the ground truth), the Breaking Bad reader on a tiny file tree in
the released layout, the sample schema, and the refusals."""

import numpy as np
import pytest
import torch

trimesh = pytest.importorskip("trimesh", reason="trimesh reads and cuts the meshes")

from datamodules.breaking_bad import (BreakingBadDataModule, FractureDataset, cut_mesh, fracture_pair,  # noqa: E402
                                      synthetic_fracture)
from zoo.errors import ZooError  # noqa: E402
from zoo.pmtr.geometry import apply_transform, relative_pose  # noqa: E402


def test_synthetic_fractures_are_watertight_and_reassemble_the_original():
    rng = np.random.default_rng(0)
    for n_parts in (2, 3):
        whole, parts = synthetic_fracture(rng, n_parts, subdivisions=2)
        assert len(parts) == n_parts
        assert all(p.is_watertight for p in parts)
        assert sum(p.volume for p in parts) == pytest.approx(whole.volume, rel=1e-6)
        np.testing.assert_allclose(np.vstack([p.bounds for p in parts]).min(0), whole.bounds[0], atol=1e-9)
        np.testing.assert_allclose(np.vstack([p.bounds for p in parts]).max(0), whole.bounds[1], atol=1e-9)
    # the two caps of one cut are the same polygon: equal area, and the halves' areas add up to the whole + 2 caps
    ico = trimesh.creation.icosphere(2)
    a, b = cut_mesh(ico, [0.1, 0.0, 0.0], [1.0, 0.0, 0.0])
    cap = np.pi * (1 - 0.1 ** 2)
    assert a.area + b.area - ico.area == pytest.approx(2 * cap, rel=0.05)


def test_ground_truth_poses_reassemble_the_sampled_parts():
    rng = np.random.default_rng(1)
    _, parts = synthetic_fracture(rng, 3, subdivisions=2)
    ds = FractureDataset(["x"], lambda i: parts, "test", 900, 100, True, seed=0)
    s = ds[0]
    assert len(s["parts"]) == 3 and s["anchor"] == int(np.argmax([p.area for p in parts]))
    for i, x in enumerate(s["parts"]):
        p = x.double() @ s["gt_rotations"][i].double() + s["gt_translations"][i].double()  # back to the assembly
        d = np.abs(trimesh.proximity.ProximityQuery(parts[i]).signed_distance(p.numpy()))
        assert d.max() < 1e-4  # on the part's own surface
        assert float(x.mean(0).abs().max()) < 1e-5  # re-centred
    r, t = relative_pose(s["gt_rotations"][0], s["gt_translations"][0], s["gt_rotations"][1], s["gt_translations"][1])
    back0 = s["parts"][0] @ s["gt_rotations"][0] + s["gt_translations"][0]
    torch.testing.assert_close(apply_transform(s["parts"][0], r, t),
                               (back0 - s["gt_translations"][1]) @ s["gt_rotations"][1].T, rtol=0, atol=1e-5)
    assert ds[0]["parts"][0].equal(s["parts"][0])  # evaluation draws are fixed per sample


def test_multi_part_training_pairs_take_the_most_touching_partner():
    rng = np.random.default_rng(2)
    far = [np.zeros((5, 3)), np.zeros((5, 3)) + 0.01, np.zeros((5, 3)) + 10]
    s, t = fracture_pair(far, rng)
    assert {s, t} == {0, 1} or (s == 2 and t in (0, 1))


def _write_tree(root, n_pieces=2, bad=None):
    rng = np.random.default_rng(3)
    _, parts = synthetic_fracture(rng, 2, subdivisions=2)
    folder = root / "everyday" / "Bottle" / "0a1b" / "fractured_0"
    folder.mkdir(parents=True)
    for i, p in enumerate(parts[:n_pieces]):
        p.export(folder / f"piece_{i}.obj")
    if bad == "nan":
        (folder / "piece_1.obj").write_text("v 0 0 0\nv 1 0 0\nv nan 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    if bad == "flat":
        (folder / "piece_1.obj").write_text("v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n")
    if bad == "2d":  # a vertex line with two coordinates: trimesh parses (n, 2) vertices
        (folder / "piece_1.obj").write_text("v 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    if bad == "zero":  # 1-based indices; trimesh read this face as a valid one
        (folder / "piece_1.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 0/1 2 4\nf 1 3 4\n")
    lists = root / "data_list"
    lists.mkdir()
    line = "002 everyday/Bottle/0a1b/fractured_0\n005 everyday/Bottle/0a1b/fractured_9\n"  # the 5-part one is filtered
    (lists / "everyday_train.txt").write_text(line)
    (lists / "everyday_val.txt").write_text(line)
    return parts


def _dm(root, **kw):
    args = dict(source="breaking_bad", data_root=str(root), category="everyday", n_points=600,
                min_points_per_part=100)
    return BreakingBadDataModule(**{**args, **kw})


def test_reads_the_released_layout_and_official_split_files(tmp_path):
    parts = _write_tree(tmp_path)
    dm = _dm(tmp_path)
    dm.setup("fit")
    assert len(dm._sets["train"]) == 1 and dm._sets["train"].names == ["everyday/Bottle/0a1b/fractured_0"]
    s = next(iter(dm.train_dataloader()))
    assert set(s) == {"parts", "gt_rotations", "gt_translations", "anchor", "name"}
    assert len(s["parts"]) == 2 and sum(len(p) for p in s["parts"]) >= 590
    assert all(len(p) >= 100 and p.dtype == torch.float32 for p in s["parts"])
    r = s["gt_rotations"][0]
    torch.testing.assert_close(r @ r.T, torch.eye(3), atol=1e-5, rtol=0)
    areas = sorted(p.area for p in parts)
    counts = sorted(len(p) for p in dm._sets["val"][0]["parts"])
    assert counts[0] / sum(counts) == pytest.approx(areas[0] / sum(areas), abs=0.02)  # split by area
    assert "local files" in dm.card_metadata()["data_source"] and "datasets" not in dm.card_metadata()
    # the card names the files by their path and does not call a user's meshes the Breaking Bad release
    assert str(tmp_path) in dm.card_metadata()["data_source"]
    assert not dm.card_metadata()["data_source"].startswith("Breaking Bad")


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(ZooError, match="split file .*everyday_train.txt not found"):
        _dm(tmp_path).setup("fit")
    one = tmp_path / "one"
    _write_tree(one, n_pieces=1)
    dm = _dm(one)  # meshes are read per sample, as the official loader
    dm.setup("fit")
    with pytest.raises(ZooError, match="holds 1 part"):
        dm._sets["train"][0]
    for bad, msg in (("nan", "non-finite vertices"), ("flat", "fewer than 100 points"),
                     ("2d", r"vertices of shape \(\d+, 2\), not \(n, 3\)"),
                     ("zero", r"piece_1.obj, line 6: a face names vertex 0; OBJ vertex indices start at 1")):
        root = tmp_path / bad
        _write_tree(root, bad=bad)
        dm = _dm(root)
        dm.setup("fit")
        with pytest.raises(ZooError, match=msg):
            dm._sets["train"][0]
    with pytest.raises(ZooError, match="batch_size must be 1"):
        BreakingBadDataModule(source="synthetic", batch_size=2)
    with pytest.raises(ZooError, match="data_root"):
        BreakingBadDataModule(source="breaking_bad").setup("fit")


def test_data_root_with_the_synthetic_source_is_refused(tmp_path):
    # the smoke configs say source: synthetic; a data_root added alone would be ignored
    with pytest.raises(ZooError, match="read only with source='breaking_bad'.*--data.init_args.source breaking_bad"):
        BreakingBadDataModule(source="synthetic", data_root=str(tmp_path))


def test_synthetic_source_is_seeded_and_logged_in_the_card():
    a = BreakingBadDataModule(source="synthetic", n_train=1, n_val=1, n_points=400, min_points_per_part=100,
                              subdivisions=2)
    b = BreakingBadDataModule(source="synthetic", n_train=1, n_val=1, n_points=400, min_points_per_part=100,
                              subdivisions=2)
    a.setup("fit"), b.setup("fit")
    assert a._sets["val"][0]["parts"][0].equal(b._sets["val"][0]["parts"][0])
    first, second = a._sets["train"][0], a._sets["train"][0]
    assert not first["gt_rotations"][0].equal(second["gt_rotations"][0])  # a new training draw per read
    assert a.card_metadata()["data_source"].startswith("embedded: seeded synthetic fractures")


def _head_read(ds, i, read):
    """Oracle: a read as the code before `train_redraw` made it (commit f977a30's `FractureDataset.__getitem__` and
    `pose_parts`, copied): one generator, points, then pair/order, then one rotation per posed part."""
    from scipy.spatial.transform import Rotation

    from datamodules.breaking_bad import sample_parts

    rng = np.random.default_rng([ds.seed, i, read if ds.split == "train" else 1 << 20])
    meshes = ds.load(i)
    pts = sample_parts(meshes, ds.n_points, ds.min_points, rng, ds.names[i])
    areas = [float(m.area) for m in meshes]
    anchor = int(np.argmax(areas))
    if ds.split != "test" and len(pts) > 2:
        s, t = fracture_pair(pts, rng)
        pts, anchor = [pts[s], pts[t]], 0 if areas[s] >= areas[t] else 1
    if ds.split == "train" and len(pts) == 2 and rng.random() > 0.5:
        pts, anchor = pts[::-1], 1 - anchor
    posed, rots, cens = [], [], []
    for p in pts:
        c = p.mean(axis=0)
        r = Rotation.random(random_state=rng).as_matrix()
        posed.append(torch.tensor((p - c) @ r.T, dtype=torch.float32))
        rots.append(torch.tensor(r, dtype=torch.float32))
        cens.append(torch.tensor(c, dtype=torch.float32))
    return {"parts": posed, "gt_rotations": rots, "gt_translations": cens, "anchor": anchor, "name": ds.names[i]}


def _same(a: dict, b: dict) -> bool:
    return a["anchor"] == b["anchor"] and a["name"] == b["name"] and all(
        len(a[k]) == len(b[k]) and all(x.equal(y) for x, y in zip(a[k], b[k]))
        for k in ("parts", "gt_rotations", "gt_translations"))


def _synthetic_dm(**kw):
    args = {"source": "synthetic", "n_train": 2, "n_val": 1, "n_test": 1, "n_points": 400, "min_points_per_part": 100,
            "subdivisions": 2, "seed": 3}
    dm = BreakingBadDataModule(**{**args, **kw})
    dm.setup(None)
    return dm


@pytest.mark.parametrize("max_part", [2, 3])
def test_default_draws_are_the_draws_before_train_redraw(max_part):
    # the default redraws points, order and rotation from one generator in the old order, bit for bit
    dm = _synthetic_dm(max_part=max_part)
    for split in ("train", "val", "test"):
        ds = dm._sets[split]
        for read in range(3):
            for i in range(len(ds)):
                assert _same(ds[i], _head_read(ds, i, read)), (split, i, read)


def _parts_by_identity(sample: dict, centres: list[torch.Tensor]) -> list[int]:
    """Which part of the fracture sits at each position: the nearest part centre of the first read (the centres of
    one part move by ~0.01 between draws, two parts' centres are ~0.3 apart)."""
    return [int(torch.stack([(c - x).norm() for x in centres]).argmin()) for c in sample["gt_translations"]]


@pytest.mark.parametrize("redraw", [(), ("rotation",), ("points", "order"), ("points",), ("order",),
                                    ("points", "order", "rotation")])
def test_train_redraw_redraws_exactly_what_it_names(redraw):
    ds = _synthetic_dm(train_redraw=redraw)._sets["train"]
    default = _synthetic_dm()._sets["train"]
    reads = [ds[0] for _ in range(8)]
    assert _same(reads[0], default[0])  # every setting's first read is the default's first read
    first = reads[0]
    ids0 = _parts_by_identity(first, first["gt_translations"])
    assert ids0 == [0, 1]
    # part identity -> (its centred assembly-frame points, its rotation) at each read
    swapped, moved, turned = [], [], []
    for s in reads[1:]:
        ids = _parts_by_identity(s, first["gt_translations"])
        assert sorted(ids) == [0, 1]
        swapped.append(ids != ids0)
        for pos, p in enumerate(ids):
            centred = (s["parts"][pos].double() @ s["gt_rotations"][pos].double())
            centred0 = first["parts"][p].double() @ first["gt_rotations"][p].double()
            same_points = centred.shape == centred0.shape and torch.allclose(centred, centred0, atol=1e-5, rtol=0)
            moved.append(not same_points)
            if not same_points:  # a new sample: not even one point in common
                assert torch.cdist(centred, centred0).min() > 1e-6
            else:
                assert s["gt_translations"][pos].equal(first["gt_translations"][p])
            same_rotation = s["gt_rotations"][pos].equal(first["gt_rotations"][p])
            turned.append(not same_rotation)
            if not same_rotation:
                assert (s["gt_rotations"][pos] - first["gt_rotations"][p]).abs().max() > 1e-3
    # redrawn: changes at every read (points, rotation) or at some reads (the swap, probability 1/2); kept: never
    assert all(moved) if "points" in redraw else not any(moved)
    assert all(turned) if "rotation" in redraw else not any(turned)
    assert any(swapped) and not all(swapped) if "order" in redraw else not any(swapped)
    if not redraw:  # one fixed posed pair
        assert all(_same(s, first) for s in reads)


def test_train_redraw_is_seeded_and_resumes():
    a, b = (_synthetic_dm(train_redraw=("rotation",))._sets["train"] for _ in range(2))
    first = a[1]
    assert _same(first, b[1])
    for _ in range(3):
        assert _same(a[1], b[1])
    c = _synthetic_dm(train_redraw=("rotation",))._sets["train"]
    c.load_state_dict(a.state_dict())  # as the stateful loader restores it from last.ckpt
    nxt = a[1]
    assert _same(nxt, c[1]) and not _same(nxt, first)
    other = _synthetic_dm(train_redraw=("rotation",), seed=4)._sets["train"]
    assert not _same(other[1], first)


def test_train_redraw_refusals():
    with pytest.raises(ZooError, match=r"train_redraw: unknown 'pose'; choose among points, order, rotation"):
        BreakingBadDataModule(source="synthetic", train_redraw=("points", "pose"))
    with pytest.raises(ZooError, match="pairwise diagnostic"):
        BreakingBadDataModule(source="synthetic", max_part=3, train_redraw=("rotation",))
    BreakingBadDataModule(source="synthetic", max_part=3)  # the default stays valid for multi-part


def test_synthetic_pairs_match_the_sweeps_radii():
    # cards/pmtr.md ("Checked and not the cause"): on the CPU sweep's data (500 points, seed 0's 30 training pairs)
    # the point spacing is about the node-overlap radius 0.06, and a third of the source points have a target point
    # within it (under half within the fine radius 0.1): the radii fit the synthetic scale
    from scipy.spatial import cKDTree

    dm = BreakingBadDataModule(source="synthetic", min_part=2, max_part=2, n_points=500, min_points_per_part=128,
                               n_train=30, n_val=2, n_test=8, subdivisions=3, seed=0)
    dm.setup("fit")
    ds = dm.train_dataloader().dataset
    spacing, within_06, within_10 = [], [], []
    for i in range(len(ds)):
        s = ds[i]
        parts = [x.numpy() @ r.numpy() + c.numpy() for x, r, c in zip(s["parts"], s["gt_rotations"],
                                                                     s["gt_translations"])]
        spacing += [cKDTree(p).query(p, k=2)[0][:, 1].mean() for p in parts]
        d = cKDTree(parts[1]).query(parts[0])[0]
        within_06.append((d < 0.06).mean())
        within_10.append((d < 0.1).mean())
    assert 0.055 < np.mean(spacing) < 0.06
    assert 0.3 < np.mean(within_06) < 0.36 and 0.4 < np.mean(within_10) < 0.48
