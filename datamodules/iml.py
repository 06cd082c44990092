"""DataModule for the implicit meta-learning (IML) experiment: CVDB people, aliases, tagged definitions.

The construction itself lives in `zoo.iml.data` (plain Python); this module picks the entity source, builds one
stage's documents and serves them. Batches are dicts of lists of strings (``text``, ``source``, ``subset``,
``question``, ``answer``, ...): the model tokenizes ``text``; `callbacks.iml_tagging.IMLTagging` prefixes each
definition with its source's tag and scores the ``question``/``answer`` pairs per ``subset``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from zoo.data import refuse_unread_files, train_loader
from zoo.errors import ZooError
from zoo.iml.data import (PAPER_FRACS, IMLDataset, build_iml_dataset, cvdb_entities, fictional_cvdb, load_cvdb,
                          subset_sizes)


class IMLDataModule(L.LightningDataModule):
    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"path": ("local",)}

    def __init__(
        self,
        source: Literal["local", "embedded"] = "embedded",
        path: Optional[str] = None,
        stage: Literal["stage1", "stage2"] = "stage1",
        num_ents: int = 4000,
        seed: int = 600,
        seed_stage2: int = 0,
        frac_q_no_replacement_baseline: float = 0.10,
        frac_qd1consis: float = 0.25,
        frac_qd2incons: float = 0.25,
        frac_q: float = 0.10,
        frac_d1consis: float = 0.08,
        frac_d2consis: float = 0.08,
        frac_d3consis: float = 0.08,
        frac_no_qd_baseline: float = 0.06,
        var_length: int = 5,
        test_frac: float = 1 / 6,
        entity_association: bool = False,
        world_knowledge: bool = False,
        equalize_gender: bool = True,
        encoding: str = "auto",
        batch_size: int = 128,
        eval_batch_size: int = 128,
        max_eval_per_subset: Optional[int] = None,
        num_workers: int = 0,
    ):
        """
        Args:
            source: "local" reads the CVDB csv at `path` (real schema); "embedded" generates fictional people
                with the same six attributes (seeded by `seed`).
            path: the CVDB csv (`cross-verified-database.csv`, plain or gzipped), for source "local".
            stage: "stage1" (QA + qd1consis/qd2incons definitions) or "stage2" (d1/d2/d3consis definitions only).
            num_ents: number of people (paper: 4000, gender-balanced by popularity).
            seed: the data seed (entity split, aliases, derangement, QA split); paper seeds start at 600.
            seed_stage2: re-splits the stage-2 pool into d1/d2/d3consis/no_qd_baseline.
            frac_*: subset shares of all entities (paper values are the defaults; they must sum to 1).
            var_length: letters per alias `<|abcde|>`.
            test_frac: share of each q-entity's QA pairs held out (1/6: one of six questions).
            entity_association: add "Who is <alias>?"-style test subsets (answer: the entity's name).
            world_knowledge: add real-name QA of all entities (except q_no_replacement_baseline) to stage 1, to
                stand in for a pretrained model's knowledge when training from scratch (not in the paper).
            equalize_gender: the num_ents // 2 most-read men and women (an odd count's last place: the most-read
                of the rest), as the paper; False: the num_ents most-read people.
            encoding: text encoding of the CVDB csv: "auto" (the released file is Latin-1; a UTF-8 re-encoding is
                detected and read as UTF-8), or a codec name. A single-byte codec on a UTF-8 file is refused.
            max_eval_per_subset: cap on questions per eval subset (None: all), to keep evaluation cheap.
        """
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise ZooError(f"IMLDataModule: batch_size and eval_batch_size must be >= 1, got {batch_size}, "
                           f"{eval_batch_size}")
        if max_eval_per_subset is not None and max_eval_per_subset < 1:  # 0 read as "no cap": every question
            raise ZooError(f"IMLDataModule: max_eval_per_subset must be >= 1 (or null: every question), got "
                           f"{max_eval_per_subset}")
        refuse_unread_files(self, source, locals())
        self.save_hyperparameters()
        self.fracs = {k: getattr(self.hparams, f"frac_{k}") for k in PAPER_FRACS}
        self.dataset: IMLDataset | None = None

    def _entities(self):
        hp = self.hparams
        if hp.source == "local":
            if not hp.path:
                raise ZooError("IMLDataModule source 'local' needs `path` to the CVDB csv "
                               "(cross-verified-database.csv); or use source: embedded")
            df = load_cvdb(hp.path, hp.encoding)
            rank_zero_info(f"IMLDataModule: entities from the CVDB table {hp.path} ({len(df)} rows, encoding "
                           f"{df.attrs['encoding']}: {df.attrs['encoding_reason']})")
        elif hp.source == "embedded":
            rank_zero_info(f"IMLDataModule: entities from the embedded fictional-people generator (seed {hp.seed})")
            df = fictional_cvdb(hp.num_ents, seed=hp.seed)
        else:
            raise ZooError(f"IMLDataModule source must be 'local' or 'embedded', got {hp.source!r}")
        return cvdb_entities(df, hp.num_ents, hp.equalize_gender)

    def prepare_dataset(self) -> IMLDataset:
        if self.dataset is None:
            hp = self.hparams
            if hp.stage not in ("stage1", "stage2"):
                raise ZooError(f"IMLDataModule stage must be 'stage1' or 'stage2', got {hp.stage!r}")
            self.dataset = build_iml_dataset(
                self._entities(), seed=hp.seed, seed_stage2=hp.seed_stage2, fracs=self.fracs,
                var_length=hp.var_length, test_frac=hp.test_frac, entity_association=hp.entity_association,
                world_knowledge=hp.world_knowledge)
            rank_zero_info(f"IMLDataModule: {hp.stage}, {len(self.train_documents)} training documents, "
                           f"entities per subset {subset_sizes(self.dataset)}")
        return self.dataset

    def setup(self, stage: str | None = None) -> None:
        self.prepare_dataset()

    @property
    def train_documents(self) -> list[dict]:
        return self.prepare_dataset().train[self.hparams.stage]

    @property
    def eval_sets(self) -> dict[str, list[dict]]:
        sets = self.prepare_dataset().test[self.hparams.stage]
        cap = self.hparams.max_eval_per_subset
        return {k: v[:cap] if cap else v for k, v in sets.items()}

    def eval_records(self) -> list[dict]:
        sets = self.eval_sets  # a property: built once here
        return [r for k in sorted(sets) for r in sets[k]]

    def card_metadata(self) -> dict:
        hp = self.hparams
        if hp.source == "embedded":
            return {"data_source": f"embedded: {hp.num_ents} fictional people in the CVDB schema (not the CVDB table)"}
        return {"data_source": f"a table in the CVDB schema (Laouenan et al. 2022), {hp.num_ents} people, from "
                               f"{hp.path}"}

    def train_dataloader(self) -> DataLoader:
        # Shuffled with `seed` in both stages; the official stage 2 trains with seed = seed_stage2 (its own TODO
        # questions that), so its stage-2 seeds vary the data order as well as the split (cards/iml.md).
        return train_loader(self.train_documents, self.hparams.batch_size, shuffle=True, seed=self.hparams.seed,
                            num_workers=self.hparams.num_workers)

    def val_dataloader(self) -> DataLoader:
        # One loader over all subsets (each record names its subset): no per-dataloader metric suffixes.
        return DataLoader(self.eval_records(), batch_size=self.hparams.eval_batch_size, shuffle=False,
                          num_workers=self.hparams.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
