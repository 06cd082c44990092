"""TB / DB / SubTB losses equal torchgfn 2.4.1's on the same trajectories and parameters (the peer)."""

from __future__ import annotations

import pytest
import torch

from zoo.gfnpg import Hypergrid
from zoo.gfnpg.objectives import db_loss, subtb_loss, tb_loss
from zoo.gfnpg.sampling import Trajectories, backward_log_probs, forward_log_probs, mlp, state_values

gfn = pytest.importorskip("gfn", reason="torchgfn (the peer) is not installed")
from gfn.estimators import DiscretePolicyEstimator, ScalarEstimator  # noqa: E402
from gfn.gflownet import DBGFlowNet, SubTBGFlowNet, TBGFlowNet  # noqa: E402
from gfn.gym import HyperGrid  # noqa: E402
from gfn.preprocessors import KHotPreprocessor  # noqa: E402
from gfn.samplers import Sampler  # noqa: E402

H, D, R0 = 8, 2, 0.1


class AsFloat(torch.nn.Module):
    """torchgfn's K-hot preprocessor emits integers; our networks take the same one-hot as floats."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.input_dim = net[0].in_features

    def forward(self, x):
        return self.net(x.float())


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    ours = Hypergrid(H, D, R0)
    ref = HyperGrid(ndim=D, height=H, reward_fn_kwargs={"R0": R0, "R1": 0.5, "R2": 2.0})
    pre = KHotPreprocessor(H, D)
    nets = {"pf": mlp(H * D, D + 1, 32, 2), "pb": mlp(H * D, D, 32, 2), "logF": mlp(H * D, 1, 32, 2)}
    est = {
        "pf": DiscretePolicyEstimator(AsFloat(nets["pf"]), D + 1, preprocessor=pre),
        "pb": DiscretePolicyEstimator(AsFloat(nets["pb"]), D + 1, preprocessor=pre, is_backward=True),
        "pb_uniform": DiscretePolicyEstimator.uniform(D + 1, preprocessor=pre),
        "logF": ScalarEstimator(AsFloat(nets["logF"]), preprocessor=pre),
    }
    trajectories = Sampler(estimator=est["pf"]).sample_trajectories(ref, n=32)
    ours_traj = Trajectories(trajectories.states.tensor.clone(), trajectories.actions.tensor[..., 0].clone(),
                             trajectories.terminating_idx.clone())
    return ours, ref, nets, est, trajectories, ours_traj


def _ours(setup, trained_pb):
    ours, _, nets, _, _, traj = setup
    log_pf = forward_log_probs(ours, nets["pf"], traj)
    log_pb = backward_log_probs(ours, nets["pb"] if trained_pb else None, traj)
    return ours, nets, traj, log_pf, log_pb, ours.log_reward(traj.terminal_states)


@pytest.mark.parametrize("trained_pb", [False, True], ids=["U", "B"])
def test_trajectory_balance(setup, trained_pb):
    _, ref, _, est, trajectories, _ = setup
    log_z = torch.nn.Parameter(torch.tensor(0.7))
    peer = TBGFlowNet(est["pf"], est["pb" if trained_pb else "pb_uniform"], logZ=log_z, log_reward_clip_min=-12.0)
    expected = peer.loss(ref, trajectories, recalculate_all_logprobs=True)
    _, _, _, log_pf, log_pb, log_r = _ours(setup, trained_pb)
    got = tb_loss(log_pf, log_pb, log_r, log_z)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert float(got.detach()) > 0.1


@pytest.mark.parametrize("trained_pb", [False, True], ids=["U", "B"])
def test_detailed_balance(setup, trained_pb):
    _, ref, _, est, trajectories, _ = setup
    peer = DBGFlowNet(est["pf"], est["pb" if trained_pb else "pb_uniform"], est["logF"])
    # the official DB divides the sum over transitions by the number of trajectories (torchgfn: reduction)
    expected = peer.loss(ref, trajectories.to_transitions(), recalculate_all_logprobs=True, reduction="sum")
    ours, nets, traj, log_pf, log_pb, log_r = _ours(setup, trained_pb)
    got = db_loss(log_pf, log_pb, state_values(ours, nets["logF"], traj), traj, log_r)
    torch.testing.assert_close(got, expected / len(traj), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trained_pb", [False, True], ids=["U", "B"])
@pytest.mark.parametrize("lamda", [0.9, 0.99])
def test_subtrajectory_balance(setup, trained_pb, lamda):
    _, ref, _, est, trajectories, _ = setup
    peer = SubTBGFlowNet(est["pf"], est["pb" if trained_pb else "pb_uniform"], est["logF"],
                         weighting="geometric_within", lamda=lamda, log_reward_clip_min=-12.0)
    expected = peer.loss(ref, trajectories, recalculate_all_logprobs=True)
    ours, nets, traj, log_pf, log_pb, log_r = _ours(setup, trained_pb)
    got = subtb_loss(log_pf, log_pb, state_values(ours, nets["logF"], traj), traj, log_r, lamda)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
