"""GraphDataModule: the real file formats (written here as each source documents them), the official
standardisation, the bundled and generated graphs, and bad input."""

from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

from datamodules.graphs import GraphDataModule, gnp_graph, planted_clusters, read_snap
from zoo.clusterdel import as_graph
from zoo.errors import ZooError

# a small directed, weighted graph with a self-loop: the kind of matrix SuiteSparse's SNAP group holds
RAW = sp.csr_array(np.array([[1, 2, 0, 0], [0, 0, 1, 0], [0, 1, 0, 3], [1, 0, 0, 0]], dtype=float))
STANDARD = np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]])  # no loops, A + A', ones


def _dm(source, path=None, **kw):
    dm = GraphDataModule(source=source, path=None if path is None else str(path), **kw)
    dm.setup("test")
    return dm


def test_repository_mat_format(tmp_path):
    adj = sp.csc_matrix(STANDARD.astype(float))  # the official files: sparse double, key A
    sio.savemat(tmp_path / "squareA.mat", {"A": adj})
    (g,) = _dm("mat", tmp_path).graphs
    assert g.name == "squareA" and g.m == 4 and np.array_equal(g.adj.toarray(), STANDARD)


def test_standardised_snap_v73_hdf5_mat(tmp_path):
    """The authors' simple-<name>.mat (MAT.jl, v7.3 = HDF5): sparse A as data/ir/jc."""
    h5py = pytest.importorskip("h5py")
    a = sp.csc_array(STANDARD.astype(float))
    path = tmp_path / "simple-square.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        grp = f.create_group("A")
        grp.attrs["MATLAB_class"] = np.bytes_("double")
        grp.attrs["MATLAB_sparse"] = np.uint64(4)
        grp["data"], grp["ir"], grp["jc"] = a.data, a.indices.astype(np.uint64), a.indptr.astype(np.uint64)
    # the 128-byte MATLAB header in the HDF5 user block: text, version 0x0200, endian indicator "IM"
    text = b"MATLAB 7.3 MAT-file, Platform: julia, Created on: today HDF5 schema 1.00 ."
    with open(path, "r+b") as fh:
        fh.write(text.ljust(116, b" ") + b"\0" * 8 + b"\x00\x02IM")
    (g,) = _dm("mat", path).graphs
    assert np.array_equal(g.adj.toarray(), STANDARD)


def test_snap_formats_are_standardised_like_the_official_script(tmp_path):
    # SuiteSparse .mat: struct Problem with field A
    sio.savemat(tmp_path / "g1.mat", {"Problem": {"A": sp.csc_matrix(RAW), "name": "SNAP/g1"}})
    # Matrix Market, general (directed) real, as in SuiteSparse's tar.gz archives <name>/<name>.mtx
    buf = io.BytesIO()
    sio.mmwrite(buf, sp.coo_matrix(RAW))
    data = buf.getvalue()
    (tmp_path / "g2.mtx").write_bytes(data)
    with tarfile.open(tmp_path / "g3.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("g3/g3.mtx")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    # SNAP's edge list: comment header, tab-separated FromNodeId ToNodeId, non-contiguous ids
    text = "# Directed graph: g4.txt\n# Nodes: 4 Edges: 6\n# FromNodeId\tToNodeId\n" \
           "10\t10\n10\t20\n20\t30\n30\t20\n30\t40\n40\t10\n"
    with gzip.open(tmp_path / "g4.txt.gz", "wt") as fh:
        fh.write(text)
    dm = _dm("snap", tmp_path, names=["g1", "g2", "g3", "g4"])
    for g in dm.graphs:
        assert np.array_equal(g.adj.toarray(), STANDARD), g.name
    # the steps, one by one, on the raw matrix: self-loops dropped, directions and weights forgotten
    assert as_graph(read_snap(tmp_path / "g2.mtx"), standardise=True).m == 4


def test_networkx_and_embedded_sources():
    dm = _dm("networkx")
    assert [(g.name, g.m) for g in dm.graphs] == [("karate", 78), ("les_miserables", 254), ("florentine", 20),
                                                   ("davis", 89)]
    assert "networkx" in dm.card_metadata()["data_source"]
    em = _dm("embedded")
    assert [g.name for g in em.graphs] == [f"gnp_n40_p0.15_seed{s}" for s in range(3)]
    assert np.array_equal(gnp_graph(40, 0.15, 1).toarray(), gnp_graph(40, 0.15, 1).toarray())  # seeded
    big = as_graph(planted_clusters(6000, 12, 0.5, 2e-6, seed=0))
    assert big.m >= 100_000  # the benchmark's scale


def test_shared_smallgraphs(shared_data):
    dm = _dm("mat", shared_data / "cluster_deletion" / "smallgraphs")
    assert len(dm.graphs) == 18
    karate = next(g for g in dm.graphs if g.name == "KarateA")
    assert (karate.n, karate.m) == (34, 78)


@pytest.mark.parametrize("matrix, words", [
    (np.array([[0, 1], [0, 0]]), "not symmetric"),
    (np.array([[0, 2], [2, 0]]), "weighted"),
    (np.array([[1, 1], [1, 0]]), "self-loops"),
    (np.zeros((3, 3)), "empty"),
])
def test_bad_adjacency_is_a_one_line_error(tmp_path, matrix, words):
    sio.savemat(tmp_path / "bad.mat", {"A": sp.csc_matrix(matrix.astype(float))})
    with pytest.raises(ZooError, match=words) as e:
        _dm("mat", tmp_path)
    assert "\n" not in str(e.value) and "bad" in str(e.value)


def test_missing_key_or_file_is_a_one_line_error(tmp_path):
    sio.savemat(tmp_path / "nokey.mat", {"B": sp.csc_matrix(STANDARD.astype(float))})
    with pytest.raises(ZooError, match="no key 'A'"):
        _dm("mat", tmp_path)
    with pytest.raises(ZooError, match="not found.*SuiteSparse"):
        _dm("snap", tmp_path, names=["ca-GrQc"])
    with pytest.raises(ZooError, match="needs data.path"):
        GraphDataModule(source="mat")
    with pytest.raises(ZooError, match="unknown networkx"):
        _dm("networkx", names=["nope"])


def test_edge_list_errors_name_the_files_line(tmp_path):
    # numpy's row count skips the comment lines; the error must point at the line a user sees in the file
    (tmp_path / "mine.txt").write_text("# Nodes: 3 Edges: 2\n# FromNodeId\tToNodeId\n1\t2\n2\tx\n")
    with pytest.raises(ZooError, match=r"mine.txt' must hold two integer node ids per line, line 4: '2\\tx'"):
        _dm("snap", tmp_path / "mine.txt")


def test_names_not_in_the_folder_list_the_graphs_there(tmp_path):
    # the smoke config's names are networkx graphs: pointing it at your own folder must say what to pick instead
    (tmp_path / "mine.txt").write_text("1\t2\n2\t3\n")
    with pytest.raises(ZooError, match=r"graph 'karate' not found .*; the graphs there: mine \(names: null for all\)"):
        _dm("snap", tmp_path, names=["karate"])
