"""The one place that knows every paper of the zoo.

`zoo list` and the tests read this table. A paper marked ``implemented`` must have its package,
card, tests, configs and smoke twins; ``tests/test_registry.py`` enforces it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paper:
    id: str
    title: str
    url: str
    code: str  # official repository, or "none"
    status: str = "planned"  # "implemented" | "in progress" | "planned"
    modules: tuple[str, ...] = ()  # LightningModule class paths
    datamodules: tuple[str, ...] = ()
    callbacks: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()  # stems under configs/; each has a twin under configs/smoke/
    sweeps: tuple[str, ...] = ()  # stems under configs/sweeps/ (reproductions); each has a twin under configs/smoke/sweeps/
    # Verbs the smoke test runs for each config; evaluation-only papers skip `fit`.
    smoke_verbs: tuple[str, ...] = ("fit", "test")

    @property
    def card(self) -> Path:
        return ROOT / "cards" / f"{self.id}.md"

    def config_path(self, stem: str, smoke: bool = False) -> Path:
        return ROOT / "configs" / ("smoke" if smoke else "") / f"{stem}.yaml"

    def sweep_path(self, stem: str, smoke: bool = False) -> Path:
        return ROOT / "configs" / ("smoke" if smoke else "") / "sweeps" / f"{stem}.yaml"


def _arxiv(n: str) -> str:
    return f"https://arxiv.org/abs/{n}"


PAPERS: dict[str, Paper] = {
    p.id: p
    for p in [
        Paper(
            "rosa",
            "RoSA: Accurate Parameter-Efficient Fine-Tuning via Robust Adaptation",
            _arxiv("2401.04679"),
            "github.com/IST-DASLab/RoSA",
            status="implemented",
            modules=("zoo.rosa.RoSAModule", "zoo.rosa.LoRABaselineModule", "zoo.rosa.FullFinetuneModule"),
            datamodules=("datamodules.gsm8k.GSM8KDataModule",),
            configs=("rosa_gsm8k_mask", "rosa_gsm8k", "qrosa_gsm8k_mask", "qrosa_gsm8k", "lora_gsm8k", "fft_gsm8k"),
            sweeps=("rosa_tiny_select", "rosa_tiny"),
        ),
        Paper(
            "dpformer",
            "Delving into Differentially Private Transformer",
            _arxiv("2405.18194"),
            "none",
            status="implemented",
            modules=("zoo.dpformer.DPSASRecModule",),
            datamodules=("datamodules.seqrec.SeqRecDataModule",),
            callbacks=("callbacks.dp_clipping.DPClipping",),
            configs=("dpformer_movielens", "dpformer_amazon", "dpformer_movielens_nonprivate",
                     "dpformer_movielens_vanilla"),
            sweeps=("dpformer_synthetic", "dpformer_synthetic_c"),
        ),
        Paper(
            "iml",
            "Implicit meta-learning may lead language models to trust more reliable sources",
            _arxiv("2310.15047"),
            "github.com/krasheninnikov/internalization",
            status="implemented",
            modules=("zoo.iml.IMLModule",),
            datamodules=("datamodules.iml.IMLDataModule",),
            callbacks=("callbacks.iml_tagging.IMLTagging",),
            configs=("iml_cvdb_stage1", "iml_cvdb_stage2"),
            sweeps=("iml_cvdb_tiny",),
        ),
        Paper(
            "cruxeval",
            "CRUXEval: A Benchmark for Code Reasoning, Understanding and Execution",
            _arxiv("2401.03065"),
            "github.com/facebookresearch/cruxeval",
            status="implemented",
            modules=("zoo.cruxeval.CRUXEvalModule", "zoo.cruxeval.CRUXEvalGenerationsModule"),
            datamodules=("datamodules.cruxeval.CRUXEvalDataModule",),
            configs=("cruxeval_output", "cruxeval_input", "cruxeval_generations"),
            sweeps=("cruxeval_codellama7b",),
            smoke_verbs=("test",),
        ),
        Paper(
            "score",
            "SCoRe: Submodular Combinatorial Representation Learning",
            _arxiv("2310.00165"),
            "github.com/amajee11us/SCoRe",
            status="implemented",
            modules=("zoo.score.SCoReModule",),
            datamodules=("datamodules.cifar_lt.CIFARLTDataModule", "datamodules.medmnist.MedMNISTDataModule"),
            configs=("score_cifar10lt", "score_cifar100lt", "score_organamnist", "score_cifar10lt_supcon",
                     "score_cifar10lt_ce"),
            sweeps=("score_digits_lt",),
        ),
        Paper(
            "diffoas",
            "Accelerating PDE Data Generation via Differential Operator Action in Solution Space",
            _arxiv("2402.05957"),
            "github.com/hs-dong/DiffOAS",
            status="implemented",
            modules=("zoo.diffoas.NeuralOperatorModule",),
            datamodules=("datamodules.pde.PDEDataModule",),
            configs=("diffoas_darcy", "diffoas_helmholtz", "diffoas_diffusion"),
            sweeps=("diffoas_darcy_fno",),
        ),
        Paper(
            "unlearning",
            "To Each (Textual Sequence) Its Own: Improving Memorized-Data Unlearning in Large Language Models",
            _arxiv("2405.03097"),
            "github.com/GeorgeOctavian/selective_unlearning",
            status="implemented",
            modules=("zoo.unlearning.UnlearningModule", "zoo.unlearning.MemorizeModule"),
            datamodules=("datamodules.memorization.MemorizationDataModule",),
            callbacks=("callbacks.unlearning_metrics.UnlearningMetrics",),
            configs=("unlearning_memorize_markov", "unlearning_ga_gptneo125m", "unlearning_sga_gptneo125m",
                     "unlearning_ta_gptneo125m", "unlearning_tau_gptneo125m"),
            sweeps=("unlearning_markov",),
        ),
        Paper(
            "minnorm",
            "Minimum Norm Interpolation Meets The Local Theory of Banach Spaces",
            "https://openreview.net/forum?id=G4b32bKnBy",
            "none",
            status="implemented",
            modules=("zoo.minnorm.MinNormExperiment",),
            datamodules=("datamodules.linear_designs.LinearDesignsDataModule",),
            configs=("minnorm_gaussian", "minnorm_rademacher", "minnorm_l2_laws"),
            sweeps=("minnorm_universality", "minnorm_l1_rate"),
            smoke_verbs=("test",),
        ),
        Paper(
            "gfnpg",
            "GFlowNet Training by Policy Gradients",
            "https://proceedings.mlr.press/v235/niu24c.html",
            "github.com/niupuhua1234/GFN-PG",
            status="implemented",
            modules=("zoo.gfnpg.GFNPGModule",),
            datamodules=("datamodules.gfn_envs.GFNEnvDataModule",),
            configs=("gfnpg_hypergrid", "gfnpg_bn5", "gfnpg_tfbind8"),
            sweeps=("gfnpg_known_optimum", "gfnpg_hypergrid_compare"),
        ),
        Paper(
            "bymi",
            "ByMI: Byzantine Machine Identification with False Discovery Rate Control",
            "https://proceedings.mlr.press/v235/qian24b.html",
            "github.com/mywang99/ByMI",
            status="implemented",
            modules=("zoo.bymi.ByMIExperiment", "zoo.bymi.FeatureClassifier"),
            datamodules=("datamodules.byzantine.ByzantineDataModule", "datamodules.byzantine.MachineShardDataModule"),
            callbacks=("callbacks.byzantine_identification.ByzantineIdentification",
                       "callbacks.byzantine_identification.ByzantineAttack"),
            configs=("bymi_mnist", "bymi_fmnist", "bymi_cifar10", "bymi_simulation", "bymi_ddp_digits"),
            sweeps=("bymi_simulation", "bymi_digits"),
        ),
        Paper(
            "pcdenoiser",
            "Learning Pseudo-Contractive Denoisers for Inverse Problems",
            _arxiv("2402.05637"),
            "github.com/FizzzFizzz/Learning-Pseudo-Contractive-Denoisers-for-Inverse-Problems",
            status="implemented",
            modules=("zoo.pcdenoiser.PCDenoiserModule",),
            datamodules=("datamodules.restoration.RestorationDataModule",),
            configs=("pcdenoiser_div2k", "pcdenoiser_deblur_set12", "pcdenoiser_deblur_set12_gd",
                     "pcdenoiser_poisson_set12", "pcdenoiser_poisson_deblur_bsd68", "pcdenoiser_sisr_set12"),
            sweeps=("pcdenoiser_camera",),
        ),
        Paper(
            "dpodiff",
            "DPO-Diff: On Discrete Prompt Optimization for Diffusion Models",
            _arxiv("2407.01606"),
            "github.com/ruocwang/dpo-diffusion",
            status="implemented",
            modules=("zoo.dpodiff.DPODiffModule",),
            datamodules=("datamodules.prompts.PromptsDataModule",),
            configs=("dpodiff_improve_diffusiondb", "dpodiff_attack_diffusiondb", "dpodiff_improve_coco"),
            sweeps=("dpodiff_tiny_search", "dpodiff_tiny_epo_long"),
            smoke_verbs=("test",),
        ),
        Paper(
            "vpdm",
            "VPDM: Vague Prototype-Oriented Diffusion Model for Multi-Class Anomaly Detection",
            "https://icml.cc/Conferences/2024",
            "none",
            status="implemented",
            modules=("zoo.vpdm.VPDMModule",),
            datamodules=("datamodules.anomaly.AnomalyDataModule",),
            configs=("vpdm_mvtec", "vpdm_visa", "vpdm_mpdd"),
            sweeps=("vpdm_textures",),
        ),
        Paper(
            "clusterdel",
            "Combinatorial Approximations for Cluster Deletion: Simpler, Faster, and Better",
            _arxiv("2404.16131"),
            "github.com/vibalcam/combinatorial-cluster-deletion",
            status="implemented",
            modules=("zoo.clusterdel.ClusterDeletionEval",),
            datamodules=("datamodules.graphs.GraphDataModule",),
            configs=("clusterdel_snap", "clusterdel_smallgraphs"),
            sweeps=("clusterdel_smallgraphs",),
            smoke_verbs=("test",),
        ),
        Paper(
            "regal",
            "ReGAL: Refactoring Programs to Discover Generalizable Abstractions",
            _arxiv("2401.16467"),
            "github.com/esteng/regal_program_learning",
            status="implemented",
            modules=("zoo.regal.ReGALModule",),
            datamodules=("datamodules.regal.ReGALDataModule",),
            configs=("regal_logo", "regal_date", "regal_textcraft"),
            sweeps=("regal_loop_cpu",),
        ),
        Paper(
            "gentle",
            "GENTLE: Generative Conditional Distributions by Neural (Entropic) Optimal Transport",
            _arxiv("2406.02317"),
            "github.com/nguyenngocbaocmt02/GENTLE",
            status="in progress",
            modules=("zoo.gentle.GENTLEModule", "zoo.gentle.CWGANModule", "zoo.gentle.PooledMarginalModule",
                     "zoo.gentle.NearestNeighboursModule", "zoo.gentle.MGANModule"),
            datamodules=("datamodules.conditional.ConditionalDataModule",),
            configs=("gentle_toy1", "gentle_toy1_no_ot", "gentle_toy1_marginal", "gentle_toy1_cwgan", "gentle_toy1_knn",
                     "gentle_toy1_mgan", "gentle_toy2",
                     "gentle_cps", "gentle_cps_cwgan", "gentle_cps_mgan", "gentle_ecm", "gentle_ecm_cwgan"),
            sweeps=("gentle_toy1", "gentle_toy1_confirm", "gentle_toy1_select", "gentle_toy1_reconfirm",
                    "gentle_toy1_long", "gentle_toy1_fresh", "gentle_toy1_sinkhorn", "gentle_toy1_sinkhorn_fresh",
                    "gentle_toy1_n1", "gentle_toy1_n1_fresh", "gentle_toy1_n1_debias", "gentle_toy1_official",
                    "gentle_toy1_lipschitz", "gentle_toy1_lipschitz_fresh", "gentle_toy1_converge", "gentle_toy1_n1000",
                    "gentle_toy1_n2", "gentle_toy1_n2_fresh", "gentle_toy1_n3", "gentle_toy1_n4", "gentle_toy1_n10",
                    "gentle_toy1_n500x5", "gentle_toy1_n1000x5", "gentle_toy1_n1000x5_converge",
                    "gentle_toy1_n1000x5_long_fresh", "gentle_toy1_small_lambda", "gentle_toy1_small_lambda_fresh",
                    "gentle_toy1_bandwidth", "gentle_toy1_bandwidth_fresh", "gentle_toy2", "gentle_toy2_debias",
                    "gentle_toy2_n1", "gentle_toy1_released", "gentle_toy1_b500", "gentle_toy1_fullbatch",
                    "gentle_toy1_power", "gentle_toy1_knn", "gentle_toy1_knn_fresh",
                    "gentle_toy1_mgan", "gentle_toy1_mgan_select",
                    "gentle_cps", "gentle_cps_seeds", "gentle_cps_debias", "gentle_cps_mgan", "gentle_cps_long",
                    "gentle_ecm", "gentle_ecm_grid"),
        ),
        Paper(
            "bggn",
            "Intersectional Unfairness Discovery",
            _arxiv("2405.20790"),
            "github.com/xugezheng/BGGN",
            status="implemented",
            modules=("zoo.bggn.BiasClassifierModule", "zoo.bggn.BiasPredictorModule", "zoo.bggn.VAEModule",
                     "zoo.bggn.BGGNModule", "zoo.bggn.SearchTreeModule"),
            datamodules=("datamodules.intersectional.IntersectionalSamplesDataModule",
                         "datamodules.intersectional.BiasTableDataModule"),
            configs=("bggn_synthetic_classifier", "bggn_synthetic_predictor", "bggn_synthetic_vae", "bggn_synthetic",
                     "bggn_synthetic_tree", "bggn_celeba_classifier", "bggn_celeba_predictor", "bggn_celeba_vae",
                     "bggn_celeba", "bggn_toxic_classifier", "bggn_toxic_predictor", "bggn_toxic_vae", "bggn_toxic"),
            sweeps=("bggn_synthetic",),
        ),
        Paper(
            "pmtr",
            "3D Geometric Shape Assembly via Efficient Point Cloud Matching",
            _arxiv("2407.10542"),
            "github.com/NahyukLEE/pmtr",
            status="implemented",
            modules=("zoo.pmtr.PMTRModule",),
            datamodules=("datamodules.breaking_bad.BreakingBadDataModule",),
            configs=("pmtr_everyday", "pmtr_artifact", "pmtr_everyday_multi"),
            sweeps=("pmtr_synthetic_pairs", "pmtr_overfit_probe"),
        ),
        Paper(
            "moment",
            "MOMENT: A Family of Open Time-series Foundation Models",
            _arxiv("2402.03885"),
            "github.com/moment-timeseries-foundation-model/moment",
            status="implemented",
            modules=("zoo.moment.MOMENTForecastingModule", "zoo.moment.MOMENTReconstructionModule",
                     "zoo.moment.MOMENTClassificationModule", "zoo.moment.MOMENTEmbeddingSVMModule"),
            datamodules=("datamodules.timeseries.ETTh1DataModule", "datamodules.timeseries.UCRClassificationDataModule",
                         "datamodules.timeseries.UCRAnomalyDataModule", "datamodules.timeseries.PretrainingDataModule"),
            configs=("moment_etth1", "moment_ecg5000", "moment_ecg5000_head", "moment_ucr_anomaly", "moment_pretrain"),
            sweeps=("moment_offline", "moment_etth1_horizons"),
        ),
    ]
}


def paper_of_class(class_path: str) -> Paper | None:
    """The paper a class path belongs to: `zoo.<id>.X` or any class listed in an entry."""
    parts = class_path.split(".")
    if len(parts) > 2 and parts[0] == "zoo" and parts[1] in PAPERS:
        return PAPERS[parts[1]]
    for p in PAPERS.values():
        if class_path in p.modules + p.datamodules + p.callbacks:
            return p
    return None


def find(pattern: str = "*") -> list[Paper]:
    """Papers whose id, title, status or any class/config name matches the glob (case-insensitive)."""
    pat = pattern.lower() if any(c in pattern for c in "*?[") else f"*{pattern.lower()}*"
    out = []
    for p in PAPERS.values():
        fields = [p.id, p.title, p.status, *p.modules, *p.datamodules, *p.callbacks, *p.configs]
        if any(fnmatch.fnmatch(f.lower(), pat) for f in fields):
            out.append(p)
    return out


def list_zoo(pattern: str = "*", status: Optional[Literal["implemented", "in progress", "planned"]] = None,
             configs: bool = False) -> list[str]:
    """List the papers of the zoo with their status, modules, datamodules and configs.

    Args:
        pattern: glob or substring matched against id, title, status, class paths and config names.
        status: only papers with this status ('implemented', 'in progress', 'planned').
        configs: also list each config file (paper setting and smoke twin).
    """
    rows = [p for p in find(pattern) if status is None or p.status == status]
    lines = []
    for p in rows:
        lines.append(f"{p.id:<11} {p.status:<12} {p.title}")
        for label, items in (("models", p.modules), ("data", p.datamodules), ("callbacks", p.callbacks)):
            if items:
                lines.append(f"{'':<11} {label + ':':<12} {', '.join(items)}")
        if configs:
            for stem in p.configs:
                lines.append(f"{'':<11} {'config:':<12} configs/{stem}.yaml  (smoke: configs/smoke/{stem}.yaml)")
    if not rows:
        lines.append(f"no paper matches {pattern!r}")
    print("\n".join(lines))
    return [p.id for p in rows]
