"""Fractured-object assembly data for PMTR: the volume-constrained Breaking Bad dataset, or seeded synthetic fractures.

Sources (explicit, logged, never a silent fallback):
* ``breaking_bad``: the released layout under ``data_root``: ``<category>/<Class>/<object id>/<fracture>/`` folders of
  one ``.obj`` mesh per part (``piece_0.obj``, ...), listed by the split files the PMTR code ships,
  ``data_list/{everyday,artifact}_{train,val}.txt``: one line ``NNN <category>/<Class>/<id>/<fracture>`` per sample,
  NNN = its number of parts (the official test split is the ``val`` list). Samples with ``min_part <= NNN <=
  max_part`` are kept (pairwise: 2 and 2; multi-part: 2 and 20, the public official code
  has no multi-part mode: it hard-codes 2 and 2).
* ``synthetic``: seeded primitives (ellipsoidal icospheres, boxes, cylinders, capsules with a random anisotropic
  scale) cut by seeded planes with ``trimesh.intersections.slice_mesh_plane(cap=True)`` into watertight parts.

Both then go through the official sampling: ``n_points`` surface points split by part area
(``trimesh.sample.sample_surface_even``), topped up to ``min_points_per_part`` with ``sample_surface``; each part
re-centred at its point mean and rotated by a random rotation. Validation/test draws are fixed per sample index;
training draws change every time a sample is read. Pairwise training swaps the two parts with probability 1/2;
multi-part training/validation picks a random source part and the part with most fracture points (within 0.015)
as target (ours: the public
official ``read_obj_data`` is pairwise only); multi-part test samples hold every part. A diagnostic option,
``train_redraw``, keeps some of a pairwise training read fixed (the overfitting probe of cards/pmtr.md).

A sample: ``parts`` (list of (n_i, 3) posed points), ``gt_rotations`` R_i, ``gt_translations`` c_i (a part point
is x = R_i (p - c_i)), ``anchor`` (index of the part with the largest area), ``name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation
from torch.utils.data import DataLoader, Dataset

from zoo.data import SplitLoaders, reading, refuse_unread_files, train_loader
from zoo.errors import ZooError

HOW_TO_GET = ("download the volume-constrained Breaking Bad dataset (breaking-bad-dataset.github.io) and point "
              "data.init_args.data_root at it")


def _trimesh():
    import trimesh

    return trimesh


# ---------------------------------------------------------------------------------------------------- real data
def read_split(split_dir: Path, category: str, split: str, min_part: int, max_part: int) -> list[tuple[int, str]]:
    path = split_dir / f"{category}_{split}.txt"
    if not path.is_file():
        raise ZooError(f"Breaking Bad split file {path} not found: the official data_list/{category}_{split}.txt "
                       "ships with the PMTR code (github.com/NahyukLEE/pmtr, data/data_list); set "
                       "data.init_args.split_dir to its folder")
    with reading(path, "split file (text)"):
        text = path.read_text()
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[0].isdigit():
            raise ZooError(f"{path}:{n}: expected '<number of parts> <category/Class/id/fracture>', got {line!r}")
        if min_part <= int(fields[0]) <= max_part:
            out.append((int(fields[0]), fields[1]))
    return out


def read_fracture(folder: Path, n_parts: int):
    """The part meshes of one fracture folder (sorted by file name), checked."""
    trimesh = _trimesh()
    if not folder.is_dir():
        raise ZooError(f"fracture folder {folder} not found; {HOW_TO_GET}")
    files = sorted(folder.glob("*.obj"))
    if len(files) < 2:
        raise ZooError(f"fracture folder {folder} holds {len(files)} part(s); assembly needs at least 2")
    if len(files) != n_parts:
        raise ZooError(f"fracture folder {folder} holds {len(files)} parts but its split line says {n_parts}")
    meshes = []
    for f in files:
        # process=False first: trimesh's default processing silently drops non-finite vertices; a damaged file
        # ends in numpy's ValueError/IndexError inside trimesh's parser
        with reading(f, "OBJ mesh", (IndexError, KeyError)):
            m = trimesh.load_mesh(str(f), process=False)
        if not isinstance(m, trimesh.Trimesh) or len(m.faces) == 0:
            raise ZooError(f"part {f} is not a triangle mesh (no faces)")
        if zero := _face_index_zero(f):  # trimesh reads it as a valid vertex, and the part silently changes shape
            raise ZooError(f"part {f}, line {zero}: a face names vertex 0; OBJ vertex indices start at 1")
        # a vertex line with two coordinates makes trimesh's parser return (n, 2) vertices, which only fail later,
        # deep in the surface sampling
        if np.asarray(m.vertices).ndim != 2 or np.asarray(m.vertices).shape[1] != 3:
            raise ZooError(f"part {f} has vertices of shape {np.asarray(m.vertices).shape}, not (n, 3): every vertex "
                           "line must be 'v x y z'")
        if not np.isfinite(np.asarray(m.vertices)).all():
            raise ZooError(f"part {f} has non-finite vertices")
        meshes.append(m.process())  # then the official load_mesh's default processing
    return meshes


def _face_index_zero(path: Path) -> int | None:
    """The line number of the first face (`f a b c`, each `v`, `v/vt` or `v/vt/vn`) that names vertex 0, or None."""
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            words = line.split()
            if words[:1] == [b"f"] and any(w.split(b"/")[0] in (b"0", b"-0", b"+0") for w in words[1:]):
                return lineno
    return None


# ----------------------------------------------------------------------------------------------- synthetic data
PRIMITIVES = ("ellipsoid", "box", "cylinder", "capsule")


def _primitive(kind: str, rng: np.random.Generator, subdivisions: int):
    trimesh = _trimesh()
    if kind == "ellipsoid":
        m = trimesh.creation.icosphere(subdivisions=subdivisions, radius=0.5)
    elif kind == "box":
        m = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    elif kind == "cylinder":
        m = trimesh.creation.cylinder(radius=0.5, height=1.0, sections=16 * subdivisions)
    else:
        m = trimesh.creation.capsule(radius=0.35, height=0.5, count=(8 * subdivisions, 8 * subdivisions))
    m.apply_scale(rng.uniform(0.55, 1.0, size=3))  # anisotropic: the relative pose has no continuous symmetry
    m.apply_transform(trimesh.transformations.rotation_matrix(rng.uniform(0, 2 * np.pi), rng.normal(size=3)))
    m.apply_scale(1.0 / float(np.max(m.extents)))  # max extent 1, like a unit-normalised Breaking Bad object
    m.apply_translation(-m.centroid)
    return m


def cut_mesh(mesh, origin, normal):
    """The two capped halves of `mesh` on either side of a plane."""
    trimesh = _trimesh()
    a = trimesh.intersections.slice_mesh_plane(mesh, normal, origin, cap=True)
    b = trimesh.intersections.slice_mesh_plane(mesh, -np.asarray(normal), origin, cap=True)
    return a, b


def synthetic_fracture(rng: np.random.Generator, n_parts: int, subdivisions: int = 3, kind: Optional[str] = None):
    """A seeded primitive cut into `n_parts` watertight parts by random planes (each cut splits the largest part
    through a point near its centroid). Returns (original mesh, parts)."""
    kind = kind or PRIMITIVES[int(rng.integers(len(PRIMITIVES)))]
    whole = _primitive(kind, rng, subdivisions)
    parts = [whole]
    for _ in range(n_parts - 1):
        parts.sort(key=lambda m: m.volume)
        big = parts.pop()
        for _attempt in range(20):
            normal = rng.normal(size=3)
            normal /= np.linalg.norm(normal)
            origin = big.centroid + rng.normal(scale=0.08, size=3)
            a, b = cut_mesh(big, origin, normal)
            if len(a.faces) and len(b.faces) and min(a.volume, b.volume) > 0.2 * big.volume:
                break
        else:
            raise ZooError("synthetic fracture: no plane cut the part into two pieces of >= 20% volume")
        parts += [a, b]
    return whole, parts


# ------------------------------------------------------------------------------------------ sampling and posing
def sample_parts(meshes, n_points: int, min_points: int, rng: np.random.Generator, name: str) -> list[np.ndarray]:
    """Official `read_obj_data`: n_points split by area, `sample_surface_even`, topped up with `sample_surface`."""
    trimesh = _trimesh()
    areas = [float(m.area) for m in meshes]
    total = sum(areas)
    out = []
    for i, (m, area) in enumerate(zip(meshes, areas)):
        if not area > 0:
            raise ZooError(f"{name}: part {i} has zero surface area and yields fewer than {min_points} points")
        n = int(n_points * area / total)
        pts = trimesh.sample.sample_surface_even(m, n, seed=rng)[0] if n > 0 else np.zeros((0, 3))
        if len(pts) < min_points:
            extra = trimesh.sample.sample_surface(m, min_points - len(pts), seed=rng)[0]
            pts = np.concatenate([pts, extra])
        if len(pts) < min_points or not np.isfinite(pts).all():
            raise ZooError(f"{name}: part {i} yields {len(pts)} finite surface points, fewer than {min_points}")
        out.append(np.asarray(pts, dtype=np.float64))
    return out


def fracture_pair(points: list[np.ndarray], rng: np.random.Generator, threshold: float = 0.015) -> tuple[int, int]:
    """Multi-part training pair: a random source and the part with most source points within `threshold`."""
    src = int(rng.integers(len(points)))
    counts = [-1 if j == src else int((cKDTree(points[j]).query(points[src], k=1)[0] < threshold).sum())
              for j in range(len(points))]
    return src, int(np.argmax(counts))


def pose_parts(points: list[np.ndarray], rotations: list[np.ndarray]):
    """Each part re-centred at its point mean and rotated: x = R_i (p - c_i)."""
    posed, rots, cens = [], [], []
    for p, r in zip(points, rotations):
        c = p.mean(axis=0)
        posed.append(torch.tensor((p - c) @ r.T, dtype=torch.float32))
        rots.append(torch.tensor(r, dtype=torch.float32))
        cens.append(torch.tensor(c, dtype=torch.float32))
    return posed, rots, cens


# what a training read can redraw (`train_redraw`): the surface points, the source/target order, the per-part pose
REDRAW = ("points", "order", "rotation")


class FractureDataset(Dataset):
    """Samples from a list of fractures; `load(i)` returns the part meshes of fracture i. `redraw`: what a pairwise
    training read draws anew (see `BreakingBadDataModule`'s `train_redraw`); the rest is kept from the sample's
    first read."""

    def __init__(self, names: list[str], load, split: str, n_points: int, min_points: int, multi_part: bool,
                 seed: int, redraw: tuple[str, ...] = REDRAW):
        self.names, self.load, self.split = names, load, split
        self.n_points, self.min_points, self.multi_part, self.seed = n_points, min_points, multi_part, seed
        self.redraw = frozenset(redraw)
        self.draws = [0] * len(names)

    def __len__(self) -> int:
        return len(self.names)

    # The read counts are the training set's state: the stateful loader saves them in last.ckpt, so a resumed fit
    # makes the draws the uninterrupted run would have made.
    def state_dict(self) -> dict:
        return {"draws": list(self.draws)}

    def load_state_dict(self, state: dict) -> None:
        self.draws = list(state["draws"])

    def _draw(self, meshes, areas: list[float], rng: np.random.Generator, name: str):
        """One draw, from one generator in this order: every part's points, then (training) the pair and its order,
        then one rotation per posed part. Returns (points of every part, posed part indices, anchor, {part index:
        rotation})."""
        pts = sample_parts(meshes, self.n_points, self.min_points, rng, name)
        order, anchor = list(range(len(pts))), int(np.argmax(areas))
        if self.split != "test" and len(pts) > 2:
            s, t = fracture_pair(pts, rng)
            order, anchor = [s, t], 0 if areas[s] >= areas[t] else 1
        if self.split == "train" and len(order) == 2 and rng.random() > 0.5:
            order, anchor = order[::-1], 1 - anchor
        return pts, order, anchor, {p: Rotation.random(random_state=rng).as_matrix() for p in order}

    def __getitem__(self, i: int) -> dict:
        meshes = self.load(i)
        areas = [float(m.area) for m in meshes]
        if self.split == "train":  # a new draw every read, reproducible from the seed
            read = self.draws[i]
            self.draws[i] += 1
            draws: dict[int, tuple] = {}

            def draw(k: int) -> tuple:  # read k's whole draw; an aspect not redrawn comes from read 0
                if k not in draws:
                    draws[k] = self._draw(meshes, areas, np.random.default_rng([self.seed, i, k]), self.names[i])
                return draws[k]

            pts = draw(read if "points" in self.redraw else 0)[0]
            _, order, anchor, _ = draw(read if "order" in self.redraw else 0)
            rotation = draw(read if "rotation" in self.redraw else 0)[3]  # per part, whatever its position
        else:  # fixed per sample, as the official np.random.seed(idx)
            pts, order, anchor, rotation = self._draw(meshes, areas, np.random.default_rng([self.seed, i, 1 << 20]),
                                                      self.names[i])
        posed, rots, cens = pose_parts([pts[p] for p in order], [rotation[p] for p in order])
        return {"parts": posed, "gt_rotations": rots, "gt_translations": cens, "anchor": anchor,
                "name": self.names[i]}


def first(batch: list[dict]) -> dict:
    """Batch size 1 (the official setting): a batch is the sample itself."""
    return batch[0]


class BreakingBadDataModule(SplitLoaders, L.LightningDataModule):
    """Args:
    source: ``breaking_bad`` (local files, the released layout) or ``synthetic`` (seeded fractures).
    data_root: the Breaking Bad root (holding ``everyday/``, ``artifact/``).
    category: ``everyday`` or ``artifact``.
    split_dir: folder of the official ``data_list/*.txt`` split files (default ``<data_root>/data_list``).
    min_part, max_part: kept part counts (pairwise 2, 2; multi-part 2, 20).
    n_points: surface points per sample, split by part area (official 5,000).
    min_points_per_part: at least this many per part (official 256).
    n_train, n_val, n_test: synthetic fractures per split (parts per fracture drawn in [min_part, max_part],
        capped at 5).
    subdivisions: synthetic mesh resolution.
    limit_train, limit_val: keep only the first samples of a real split (None: all).
    seed: all sampling and posing draws.
    batch_size: must be 1 (PMTR processes one sample per step, as the official code).
    train_redraw: what a pairwise training read draws anew, among ``points`` (the surface sample), ``order`` (the
        source/target swap) and ``rotation`` (each part's random pose); what is left out is kept from the sample's
        first read (its first draw's points, order, or each part's rotation), so ``[]`` is one fixed posed pair at
        every read. Default: all three, the paper's training. A diagnostic (the overfitting probe of
        cards/pmtr.md), not a paper setting; validation and test draws are fixed per sample either way.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"data_root": ("breaking_bad",),
                                                          "split_dir": ("breaking_bad",)}

    def __init__(
        self,
        source: Literal["breaking_bad", "synthetic"] = "breaking_bad",
        data_root: Optional[str] = None,
        category: Literal["everyday", "artifact"] = "everyday",
        split_dir: Optional[str] = None,
        min_part: int = 2,
        max_part: int = 2,
        n_points: int = 5000,
        min_points_per_part: int = 256,
        n_train: int = 64,
        n_val: int = 8,
        n_test: int = 16,
        subdivisions: int = 3,
        limit_train: Optional[int] = None,
        limit_val: Optional[int] = None,
        seed: int = 0,
        batch_size: int = 1,
        num_workers: int = 0,
        train_redraw: tuple[str, ...] = REDRAW,
    ):
        super().__init__()
        self.save_hyperparameters()
        refuse_unread_files(self, source, locals())
        unknown = [x for x in train_redraw if x not in REDRAW]
        if unknown:
            raise ZooError(f"train_redraw: unknown {', '.join(map(repr, unknown))}; choose among {', '.join(REDRAW)}")
        if set(train_redraw) != set(REDRAW) and max_part > 2:
            raise ZooError(f"train_redraw={list(train_redraw)} is a pairwise diagnostic (max_part=2); multi-part "
                           f"training (max_part={max_part}) redraws everything")
        if batch_size != 1:
            raise ZooError(f"batch_size must be 1 (PMTR matches one pair per step, as the official code), got "
                           f"{batch_size}")
        if not 2 <= min_part <= max_part:
            raise ZooError(f"need 2 <= min_part <= max_part, got min_part={min_part}, max_part={max_part}")
        if min_points_per_part < 1 or n_points < 2 * min_points_per_part:
            raise ZooError(f"n_points={n_points} must be at least 2 * min_points_per_part={min_points_per_part}")
        self._sets: dict[str, FractureDataset] = {}

    @property
    def multi_part(self) -> bool:
        return self.hparams.max_part > 2

    def _real(self, split: str, file_split: str, limit: Optional[int]) -> FractureDataset:
        hp = self.hparams
        if hp.data_root is None:
            raise ZooError(f"source=breaking_bad needs data.init_args.data_root; {HOW_TO_GET}")
        root = Path(hp.data_root)
        if not root.is_dir():
            raise ZooError(f"Breaking Bad root {root} not found; {HOW_TO_GET}")
        split_dir = Path(hp.split_dir) if hp.split_dir else root / "data_list"
        entries = read_split(split_dir, hp.category, file_split, hp.min_part, hp.max_part)[:limit]
        if not entries:
            raise ZooError(f"{split_dir}/{hp.category}_{file_split}.txt lists no sample with {hp.min_part} to "
                           f"{hp.max_part} parts")
        names = [e[1] for e in entries]
        rank_zero_info(f"[breaking_bad] source=breaking_bad ({hp.category}, {file_split} list): {len(names)} "
                       f"fractures with {hp.min_part}-{hp.max_part} parts from {root}")
        return FractureDataset(names, lambda i: read_fracture(root / entries[i][1], entries[i][0]), split,
                               hp.n_points, hp.min_points_per_part, self.multi_part, hp.seed, tuple(hp.train_redraw))

    def _synthetic(self, split: str, n: int, offset: int) -> FractureDataset:
        hp = self.hparams
        rng = np.random.default_rng([hp.seed, offset])
        fractures = []
        for _ in range(n):
            k = int(rng.integers(hp.min_part, min(hp.max_part, 5) + 1))
            fractures.append(synthetic_fracture(rng, k, hp.subdivisions)[1])
        names = [f"synthetic/{split}/{i}" for i in range(n)]
        rank_zero_info(f"[breaking_bad] source=synthetic: {n} seeded {split} fractures, {hp.min_part}-"
                       f"{min(hp.max_part, 5)} parts (trimesh primitives cut by slice_mesh_plane(cap=True))")
        return FractureDataset(names, lambda i: fractures[i], split, hp.n_points, hp.min_points_per_part,
                               self.multi_part, hp.seed, tuple(hp.train_redraw))

    def setup(self, stage: Optional[str] = None) -> None:
        hp = self.hparams
        want = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
        splits = want.get(stage, ("train", "val", "test"))
        for split in splits:
            if split in self._sets:
                continue
            if hp.source == "synthetic":
                n = {"train": hp.n_train, "val": hp.n_val, "test": hp.n_test}[split]
                self._sets[split] = self._synthetic(split, n, {"train": 0, "val": 1, "test": 2}[split])
            else:
                file_split = "train" if split == "train" else "val"  # official: test = the val list
                limit = hp.limit_train if split == "train" else hp.limit_val
                self._sets[split] = self._real(split, file_split, limit)

    def card_metadata(self) -> dict:
        hp = self.hparams
        mode = "multi-part" if self.multi_part else "pairwise"
        if hp.source == "synthetic":
            return {"data_source": f"embedded: seeded synthetic fractures (trimesh primitives cut by planes), {mode}"}
        # Breaking Bad is not on the Hugging Face Hub: no `datasets` id to name. The files are named by their path, as
        # the layout alone does not tell the release from a user's own meshes
        split_dir = hp.split_dir or str(Path(hp.data_root) / "data_list")
        return {"data_source": f"local files in the Breaking Bad layout under {hp.data_root} (split files "
                               f"{split_dir}/{hp.category}_{{train,val}}.txt), {hp.category}, {mode}"}

    def train_dataloader(self):
        return train_loader(self._sets["train"], 1, shuffle=True, seed=self.hparams.seed, collate_fn=first,
                            num_workers=self.hparams.num_workers)

    def eval_loader(self, split: str) -> DataLoader:
        return DataLoader(self._sets[split], batch_size=1, shuffle=False, collate_fn=first,
                          num_workers=self.hparams.num_workers)
