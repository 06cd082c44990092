"""SeqRecDataModule (real formats, leave-one-out, Poisson batches) and HR/NDCG@10 vs torchmetrics."""

import pytest
import torch
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from torchmetrics.retrieval import RetrievalHitRate, RetrievalNormalizedDCG

from datamodules.seqrec import SeqRecDataModule, synthetic_sequences
from zoo.dpformer import rank_metrics
from zoo.errors import ZooError


def test_rank_metrics_match_torchmetrics():
    g = torch.Generator().manual_seed(0)
    B, M = 40, 30
    scores = torch.randn(B, M, generator=g, dtype=torch.float64)
    target = torch.randint(0, M, (B,), generator=g)
    scores[torch.arange(B), target] += torch.linspace(-1, 4, B, dtype=torch.float64)  # a spread of ranks
    hit, ndcg = rank_metrics(scores, target, 10)
    idx = torch.arange(B).repeat_interleave(M)
    rel = torch.zeros(B, M, dtype=torch.bool)
    rel[torch.arange(B), target] = True
    ref_ndcg = RetrievalNormalizedDCG(top_k=10)(scores.flatten(), rel.flatten(), indexes=idx)
    ref_hit = RetrievalHitRate(top_k=10)(scores.flatten(), rel.flatten(), indexes=idx)
    assert 0 < hit.mean() < 1
    assert ndcg.mean().item() == pytest.approx(ref_ndcg.item(), abs=1e-6)
    assert hit.mean().item() == pytest.approx(ref_hit.item(), abs=1e-6)


def test_movielens_ratings_dat_leave_one_out(tmp_path):
    f = tmp_path / "ratings.dat"
    # UserID::MovieID::Rating::Timestamp, out of time order on purpose
    f.write_text("1::10::5::300\n1::20::4::100\n1::30::3::200\n1::40::3::400\n"
                 "2::20::5::10\n2::50::1::20\n2::10::2::30\n3::10::4::1\n")
    dm = SeqRecDataModule(source="movielens", path=str(f), max_len=4, batch_size=2)
    dm.setup("fit")
    assert dm.num_items == 5 and len(dm.sequences) == 2  # user 3 has < 3 interactions
    # user 1 in time order: 20, 30, 10, 40 -> ids 1, 2, 3, 4; train [1, 2], val target 3, test target 4
    assert dm.sequences[0] == [1, 2, 3, 4]
    assert dm.train_set.t["seq"][0].tolist() == [0, 0, 0, 1]
    assert dm.train_set.t["target"][0].tolist() == [0, 0, 0, 2]
    assert dm.val_set.t["seq"][0].tolist() == [0, 0, 1, 2] and dm.val_set.t["target"][0] == 3
    assert dm.test_set.t["seq"][0].tolist() == [0, 1, 2, 3] and dm.test_set.t["target"][0] == 4
    assert dm.item_frequency[1] == pytest.approx(1.0)  # item 1 is in both users' training part


def test_amazon_csv_with_and_without_header(tmp_path):
    a = tmp_path / "ratings_Beauty.csv"
    a.write_text("u1,i1,5.0,100\nu1,i2,4.0,200\nu1,i3,4.0,300\nu2,i2,3.0,50\n")
    dm = SeqRecDataModule(source="amazon", path=str(a), columns="user,item,rating,timestamp")  # IDs not ASINs
    dm.setup("fit")
    assert dm.sequences == [[1, 2, 3]] and dm.num_items == 3
    b = tmp_path / "beauty2023.csv"
    b.write_text("user_id,parent_asin,rating,timestamp\nu1,i1,5,3\nu1,i2,4,2\nu1,i3,4,1\n")
    dm = SeqRecDataModule(source="amazon", path=str(b))
    dm.setup("fit")
    assert dm.sequences == [[1, 2, 3]]  # time order: i3, i2, i1


def test_bad_sources_name_the_problem(tmp_path):
    with pytest.raises(ZooError, match="grouplens"):
        SeqRecDataModule(source="movielens")
    with pytest.raises(ZooError, match="not found"):
        SeqRecDataModule(source="amazon", path=str(tmp_path / "missing.csv")).setup("fit")
    bad = tmp_path / "ratings.dat"
    bad.write_text("1,2,3,4\n")
    with pytest.raises(ZooError, match="UserID::MovieID"):
        SeqRecDataModule(source="movielens", path=str(bad)).setup("fit")


def test_embedded_source_is_seeded_and_poisson_loader_yields_variable_batches():
    assert synthetic_sequences(50, 30, 3) == synthetic_sequences(50, 30, 3)
    assert synthetic_sequences(50, 30, 3) != synthetic_sequences(50, 30, 4)
    dm = SeqRecDataModule(source="embedded", synthetic_users=200, synthetic_items=40, max_len=10,
                          batch_size=4, poisson_sampling=True)
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert isinstance(loader.batch_sampler, UniformWithReplacementSampler)
    assert loader.batch_sampler.sample_rate == pytest.approx(4 / 200)
    sizes = [len(b["seq"]) for b in loader]
    assert len(sizes) == 50 and len(set(sizes)) > 2 and 0 in sizes  # Binomial(200, 0.02): empty batches occur
    assert sum(sizes) / len(sizes) == pytest.approx(4, abs=1.5)
    plain = SeqRecDataModule(source="embedded", synthetic_users=200, synthetic_items=40, batch_size=4)
    plain.setup("fit")
    assert not isinstance(plain.train_dataloader().batch_sampler, UniformWithReplacementSampler)
