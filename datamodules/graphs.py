"""Graphs for the cluster-deletion evaluation: batches are lists of `zoo.clusterdel.Graph`.

Sources (explicit in the config and logged; a missing file is a one-line error that says how to get it):

* ``mat``: the official repository's small graphs (``data/smallgraphs/*.mat``, MIT; a copy is in
  ../shared/data/cluster_deletion/smallgraphs): MATLAB files whose key ``A`` is the sparse 0/1 symmetric
  adjacency, ``scipy.io.loadmat(f)["A"]``. The authors' standardised SNAP files (``simple-<name>.mat``, written by
  Julia's MAT.jl as MATLAB v7.3 = HDF5) are read with h5py. Taken as they are: an asymmetric or weighted matrix
  or a self-loop is an error.
* ``snap``: the paper's SNAP graphs as the SuiteSparse Matrix Collection distributes them (``<name>.mat`` with the
  struct ``Problem.A``, or Matrix Market ``<name>.mtx`` / ``.mtx.gz`` / the ``<name>.tar.gz`` archive holding it), or
  SNAP's own edge lists (``<name>.txt[.gz]``: ``#`` comment lines, then one ``FromNodeId<TAB>ToNodeId`` per line;
  node ids are relabelled 0..k-1 in increasing order). Each is standardised as the official
  ``data/standardize-snap-graphs.jl`` does: (1) zero the diagonal and drop the zeros (no self-loops),
  (2) ``A + A'`` (undirected), (3) every stored entry set to 1 (unweighted). Isolated nodes are kept, as there.
* ``networkx``: graphs bundled with networkx: ``karate``, ``les_miserables``, ``florentine``, ``davis``
  (weights dropped).
* ``embedded``: seeded generators: ``{kind: gnp, n, p, seed}`` (Erdos-Renyi G(n, p)) and
  ``{kind: planted, clusters, size, p_in, p_out, seed}`` (disjoint G(size, p_in) blocks plus G(n, p_out) noise).
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path
from typing import Any, ClassVar, Literal

import lightning as L
import networkx as nx
import numpy as np
import scipy.io as sio
import scipy.sparse as sp
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.clusterdel.graph import Graph, as_graph, unique
from zoo.data import reading, refuse_unread_files
from zoo.errors import ZooError

NX_GRAPHS = {
    "karate": nx.karate_club_graph,
    "les_miserables": nx.les_miserables_graph,
    "florentine": nx.florentine_families_graph,
    "davis": nx.davis_southern_women_graph,
}
SNAP_SUFFIXES = (".mat", ".mtx", ".mtx.gz", ".tar.gz", ".txt", ".txt.gz")
GET_SMALLGRAPHS = "they are data/smallgraphs/*.mat of github.com/vibalcam/combinatorial-cluster-deletion"
GET_SNAP = ("download <name>.mat or the Matrix Market <name>.tar.gz from the SuiteSparse Matrix Collection "
            "(group SNAP), or SNAP's <name>.txt.gz edge list, into data.path")


# -- real formats --------------------------------------------------------------------------------------------
def _read_hdf5_sparse(path: Path, key: str):
    """A MATLAB v7.3 sparse matrix (HDF5 group with ``data``, ``ir``, ``jc``; rows in attribute MATLAB_sparse)."""
    import h5py

    with reading(path, "MATLAB v7.3 (HDF5) file", (KeyError,)), h5py.File(path, "r") as f:
        if key not in f:
            raise ZooError(f"{path} has no key {key!r} (keys: {sorted(f.keys())})")
        grp = f[key]
        if not isinstance(grp, h5py.Group) or "jc" not in grp:
            raise ZooError(f"{path}: key {key!r} is not a sparse matrix")
        jc, ir = grp["jc"][()].astype(np.int64), grp["ir"][()].astype(np.int64)
        data = grp["data"][()].astype(np.float64) if "data" in grp else np.ones(len(ir))
        n_rows = int(grp.attrs.get("MATLAB_sparse", len(jc) - 1))
        return sp.csc_array((data, ir, jc), shape=(n_rows, len(jc) - 1))


def _numeric(adj, path: Path, key: str):
    """What a .mat holds under `key`, if it is a real numeric matrix (dense or sparse). scipy reads a MATLAB char
    array as strings and a cell or struct as an object or record array, which `as_graph` cannot turn into a graph;
    a complex matrix would lose its imaginary parts silently on the way to 0/1."""
    kind = adj.dtype.kind if isinstance(adj, np.ndarray) or sp.issparse(adj) else None
    if kind not in ("b", "i", "u", "f"):
        what = {"U": "text (a MATLAB char array)", "S": "bytes", "O": "a cell array or struct",
                "V": "a struct", "c": "a complex matrix"}.get(kind, type(adj).__name__)
        raise ZooError(f"{path}: {key!r} is {what}, not the graph's adjacency: a real 0/1 matrix (sparse or dense)")
    return adj


def read_mat(path: str | Path, key: str = "A"):
    """The adjacency under ``key`` of a MATLAB file (v5/v7 through scipy, v7.3 through h5py)."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"graph file {path} does not exist; {GET_SMALLGRAPHS}")
    try:
        d = sio.loadmat(path)
    except NotImplementedError:  # v7.3 is HDF5
        return _read_hdf5_sparse(path, key)
    except (ValueError, OSError, sio.matlab.MatReadError) as e:  # MatReadError: an empty or truncated file
        raise ZooError(f"cannot read {path} as a MATLAB file: {e}") from e
    if key not in d:
        keys = sorted(k for k in d if not k.startswith("__"))
        raise ZooError(f"{path} has no key {key!r} (keys: {keys}); the graph's adjacency must be stored as {key!r}")
    return _numeric(d[key], path, key)


def read_suitesparse_mat(path: str | Path):
    """SuiteSparse's MATLAB format: a struct ``Problem`` with field ``A`` (or a standardised file with key A)."""
    path = Path(path)
    try:
        d = sio.loadmat(path)
    except NotImplementedError:
        return _read_hdf5_sparse(path, "A")
    except (ValueError, OSError, sio.matlab.MatReadError) as e:
        raise ZooError(f"cannot read {path} as a MATLAB file: {e}") from e
    if "Problem" in d:
        prob = d["Problem"]
        if "A" not in (prob.dtype.names or ()):
            raise ZooError(f"{path}: struct Problem has no field A")
        return _numeric(prob["A"][0, 0], path, "Problem.A")
    if "A" in d:
        return _numeric(d["A"], path, "A")
    raise ZooError(f"{path} has neither the SuiteSparse struct Problem.A nor a key 'A'")


def read_edge_list(text: str, name: str):
    """SNAP's edge list: ``#`` comments, then whitespace-separated integer node pairs, one arc per line."""
    rows = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "%"))]
    if not rows:
        raise ZooError(f"edge list {name!r} has no edges")
    try:
        pairs = np.loadtxt(io.StringIO("\n".join(rows)), dtype=np.int64, usecols=(0, 1), ndmin=2)
    except ValueError as e:
        # numpy counts rows without the comment lines: name the file's own line instead
        bad = next((f"line {i}: {ln.strip()!r}" for i, ln in enumerate(text.splitlines(), 1)
                    if ln.strip() and not ln.lstrip().startswith(("#", "%")) and not _is_edge(ln)), str(e))
        raise ZooError(f"edge list {name!r} must hold two integer node ids per line, {bad}") from e
    ids = unique(pairs.ravel())
    idx = np.searchsorted(ids, pairs)
    return sp.coo_array((np.ones(len(idx)), (idx[:, 0], idx[:, 1])), shape=(len(ids), len(ids)))


def _is_edge(line: str) -> bool:
    f = line.split()
    return len(f) >= 2 and all(x.lstrip("+-").isdigit() for x in f[:2])


def read_snap(path: str | Path):
    """Any of the SNAP/SuiteSparse formats above, by file name."""
    path = Path(path)
    name = path.name
    if name.endswith(".mat"):
        return read_suitesparse_mat(path)
    if name.endswith((".mtx", ".mtx.gz")):
        with reading(path, "Matrix Market file"):
            return sio.mmread(str(path))
    if name.endswith(".tar.gz"):
        with reading(path, "tar.gz archive of a Matrix Market file"), tarfile.open(path, "r:gz") as tar:
            stem = name[: -len(".tar.gz")]
            members = [m for m in tar.getmembers() if m.name.endswith(f"{stem}.mtx")] or \
                      [m for m in tar.getmembers() if m.name.endswith(".mtx")]
            if not members:
                raise ZooError(f"{path} holds no Matrix Market .mtx file")
            return sio.mmread(io.BytesIO(tar.extractfile(members[0]).read()))
    if name.endswith((".txt.gz", ".txt")):
        with reading(path, "SNAP edge list (UTF-8 text, gzipped if .gz)"):
            if name.endswith(".gz"):
                with gzip.open(path, "rt") as fh:
                    text = fh.read()
            else:
                text = path.read_text()
        return read_edge_list(text, name)
    raise ZooError(f"{path}: unknown SNAP graph format (expected one of {', '.join(SNAP_SUFFIXES)})")


# -- embedded generators ---------------------------------------------------------------------------------------
def _random_pairs(n: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """m distinct unordered pairs of [0, n), uniformly (rejection of repeats, vectorised)."""
    keys = np.zeros(0, np.int64)
    while len(keys) < m:
        a = rng.integers(0, n, size=int(1.2 * (m - len(keys))) + 16)
        b = rng.integers(0, n, size=len(a))
        ok = a != b
        lo, hi = np.minimum(a[ok], b[ok]), np.maximum(a[ok], b[ok])
        keys = unique(np.concatenate([keys, lo * n + hi]))
    keys = rng.permutation(keys)[:m]
    return keys // n, keys % n


def gnp_graph(n: int, p: float, seed: int = 0) -> sp.csr_array:
    """Erdos-Renyi G(n, p): each of the n(n-1)/2 pairs independently with probability p."""
    if n < 2 or not 0 < p <= 1:
        raise ZooError(f"G(n, p) needs n >= 2 and 0 < p <= 1, got n={n}, p={p}")
    rng = np.random.default_rng(seed)
    m = int(rng.binomial(n * (n - 1) // 2, p))
    u, v = _random_pairs(n, m, rng)
    return sp.csr_array((np.ones(2 * m), (np.r_[u, v], np.r_[v, u])), shape=(n, n))


def planted_clusters(clusters: int, size: int, p_in: float, p_out: float, seed: int = 0) -> sp.csr_array:
    """``clusters`` disjoint G(size, p_in) blocks (nodes in block order) plus G(n, p_out) noise edges."""
    if clusters < 1 or size < 2 or not 0 < p_in <= 1 or not 0 <= p_out <= 1:
        raise ZooError(f"planted clusters need clusters >= 1, size >= 2, 0 < p_in <= 1, 0 <= p_out <= 1, got "
                       f"{clusters}, {size}, {p_in}, {p_out}")
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(size, k=1)
    keep = rng.random((clusters, len(iu))) < p_in
    base = (np.arange(clusters) * size)[:, None]
    u, v = (base + iu)[keep], (base + ju)[keep]
    n = clusters * size
    if p_out > 0:
        m_out = int(rng.binomial(n * (n - 1) // 2, p_out))
        a, b = _random_pairs(n, m_out, rng)
        u, v = np.r_[u, a], np.r_[v, b]
    adj = sp.csr_array((np.ones(2 * len(u)), (np.r_[u, v], np.r_[v, u])), shape=(n, n))
    adj.data[:] = 1.0  # a noise edge inside a block is the same edge
    return adj


def generate(spec: dict[str, Any]) -> tuple[str, sp.csr_array]:
    """(name, adjacency) of one embedded generator spec."""
    spec = dict(spec)
    kind = spec.pop("kind", None)
    try:
        if kind == "gnp":
            name = f"gnp_n{spec['n']}_p{spec['p']}_seed{spec.get('seed', 0)}"
            return name, gnp_graph(**spec)
        if kind == "planted":
            name = (f"planted_k{spec['clusters']}_s{spec['size']}_pin{spec['p_in']}_pout{spec['p_out']}"
                    f"_seed{spec.get('seed', 0)}")
            return name, planted_clusters(**spec)
    except (KeyError, TypeError) as e:
        raise ZooError(f"bad {kind} generator spec {spec}: {e}") from e
    raise ZooError(f"generator kind must be 'gnp' or 'planted', got {kind!r}")


DEFAULT_GENERATORS = [{"kind": "gnp", "n": 40, "p": 0.15, "seed": s} for s in range(3)]


def collate_graphs(batch: list[Graph]) -> list[Graph]:
    return list(batch)


class GraphDataModule(L.LightningDataModule):
    """Graphs for ``zoo test`` of `zoo.clusterdel.ClusterDeletionEval` (batches: lists of `Graph`).

    Args:
        source: ``mat`` | ``snap`` | ``networkx`` | ``embedded`` (see the module docstring).
        path: folder (or one file) of the ``mat`` / ``snap`` graphs.
        names: which graphs: file stems (``KarateA``; ``ca-GrQc`` for snap), networkx names, or None for all
            (all files in ``path``; all four networkx graphs).
        generators: specs of the ``embedded`` graphs (default: three G(40, 0.15), seeds 0, 1, 2).
        batch_size: graphs per test step.
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("mat", "snap")}

    def __init__(self, source: Literal["mat", "snap", "networkx", "embedded"] = "mat", path: str | None = None,
                 names: list[str] | None = None, generators: list[dict[str, Any]] | None = None,
                 batch_size: int = 1):
        super().__init__()
        if source not in ("mat", "snap", "networkx", "embedded"):
            raise ZooError(f"graph source must be 'mat', 'snap', 'networkx' or 'embedded', got {source!r}")
        refuse_unread_files(self, source, locals())
        if source in ("mat", "snap") and not path:
            raise ZooError(f"graph source {source!r} needs data.path (a folder or a file); "
                           + (GET_SMALLGRAPHS if source == "mat" else GET_SNAP))
        if batch_size < 1:
            raise ZooError(f"batch_size must be >= 1, got {batch_size}")
        self.source, self.path, self.names, self.batch_size = source, path, names, batch_size
        self.generators = list(generators) if generators is not None else list(DEFAULT_GENERATORS)
        self.graphs: list[Graph] = []

    def _files(self, suffixes: tuple[str, ...], hint: str) -> list[Path]:
        root = Path(self.path)
        if not root.exists():
            raise ZooError(f"graph path {root} does not exist; {hint}")
        if root.is_file():
            return [root]
        files = sorted(f for f in root.iterdir() if f.name.endswith(suffixes))
        if self.names is None:
            if not files:
                raise ZooError(f"no {'/'.join(suffixes)} graph files in {root}; {hint}")
            return files
        out = []
        for name in self.names:
            hits = [f for f in files if f.name in {name + s for s in suffixes} | {f"simple-{name}.mat"}]
            if not hits:
                # a config's names (the smoke config's networkx graphs) are not your files': say which are there
                there = f"; the graphs there: {', '.join(self._stem(f) for f in files)} (names: null for all)" \
                    if files else ""
                raise ZooError(f"graph {name!r} not found in {root} (looked for {name}{{{','.join(suffixes)}}})"
                               f"{there}; {hint}")
            out.append(hits[0])
        return out

    @staticmethod
    def _stem(f: Path) -> str:
        for s in SNAP_SUFFIXES:
            if f.name.endswith(s):
                return f.name[: -len(s)]
        return f.stem

    def load(self) -> list[Graph]:
        if self.source == "mat":
            return [as_graph(read_mat(f), self._stem(f)) for f in self._files((".mat",), GET_SMALLGRAPHS)]
        if self.source == "snap":
            return [as_graph(read_snap(f), self._stem(f), standardise=True)
                    for f in self._files(SNAP_SUFFIXES, GET_SNAP)]
        if self.source == "networkx":
            names = self.names if self.names is not None else list(NX_GRAPHS)
            bad = [n for n in names if n not in NX_GRAPHS]
            if bad:
                raise ZooError(f"unknown networkx graph(s) {bad}; choose from {list(NX_GRAPHS)}")
            return [as_graph(nx.to_scipy_sparse_array(NX_GRAPHS[n](), weight=None, format="csr"), n) for n in names]
        return [as_graph(adj, name) for name, adj in map(generate, self.generators)]

    def setup(self, stage: str | None = None) -> None:
        if not self.graphs:
            self.graphs = self.load()
            where = self.path if self.source in ("mat", "snap") else \
                ("networkx" if self.source == "networkx" else f"{len(self.generators)} generator specs")
            rank_zero_info(f"graphs: source={self.source} ({where}), {len(self.graphs)} graphs, "
                           f"{sum(g.m for g in self.graphs)} edges in all")

    def _loader(self) -> DataLoader:
        return DataLoader(self.graphs, batch_size=self.batch_size, shuffle=False, collate_fn=collate_graphs)

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def card_metadata(self) -> dict[str, Any]:
        what = {"mat": f"graphs in .mat files (key A, as the official repository's small graphs) from {self.path}",
                "snap": f"graphs in SuiteSparse/SNAP files (standardised as the official script) from {self.path}",
                "networkx": "networkx's bundled graphs",
                "embedded": "embedded: seeded G(n,p) / planted-cluster graphs"}[self.source]
        names = ", ".join(g.name for g in self.graphs) if self.graphs else "not loaded yet"
        return {"data_source": f"{what}: {names}"}
