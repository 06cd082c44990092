"""Simulators: toy moments (σ is a standard deviation), and the vectorised ECM against a one-patient-at-a-time
reference of the same Markov model that consumes the same uniforms."""

import numpy as np
import pytest

from zoo.gentle import simulators as sim


def test_toy1_second_parameter_is_a_standard_deviation():
    x = np.array([[10.0, 5.0, 5.0]])
    mean, sd = sim.toy1_params(x)
    assert (mean[0], sd[0]) == (5 + 10 + 10 + 2.5, 1 + 1 + 1 + 0.25)
    y = sim.toy1_sample(x, 200_000, np.random.default_rng(0))[0]
    assert y.mean() == pytest.approx(27.5, abs=0.03) and y.std() == pytest.approx(3.25, rel=0.01)


def test_toy2_is_laplace():
    x = np.array([[2.0, -1.0]])
    loc, scale = sim.toy2_params(x)
    assert loc[0] == pytest.approx(-0.1) and scale[0] == pytest.approx(5 * np.sin(1.0) ** 2 + 5)
    y = sim.toy2_sample(x, 200_000, np.random.default_rng(1))[0]
    assert np.median(y) == pytest.approx(-0.1, abs=0.05) and y.std() == pytest.approx(np.sqrt(2) * scale[0], rel=0.01)


def reference_qaly(risk, aspirin, statin, drug, age0, nat, trans, dis):
    """One patient, month by month (the model as the official simulator describes it, written independently)."""
    P = sim.ecm_transition_matrices(np.array([risk]), np.array([aspirin]), np.array([statin]), np.array([drug]))[0]
    states = [6 if drug else 0]
    natural_death = False
    age = age0 - 1
    while True:
        age += 1
        p2 = -0.0023 * age + 1.1035
        P[1, 2], P[1, 3] = p2, 1 - p2
        for half in (0, 1):
            for _ in range(6):
                u = trans[len(states) - 1]
                cum = np.cumsum(P[states[-1]])
                states.append(int(np.flatnonzero(cum >= u)[0]) if (cum >= u).any() else 0)
            if half == 0 and nat[age - 1] <= sim.NATURAL_DEATH[age - 1]:
                natural_death = True
                break
        if natural_death or states[-1] == 5:
            break
    n = len(states) - 1  # transitions made
    last = states.index(5) - 1 if states[-1] == 5 else n - 1
    lived = states[:last]
    months = np.array([sim.UTILITY[s] for s in lived])
    disabled = drug == 1 and 7 in lived and last > lived.index(7) and dis <= 0.058
    if disabled:
        months[lived.index(7) + 1:] *= 0.61
    qaly = months.sum() / 12
    if natural_death:
        cv = last / 12
    else:
        k = 0
        while nat[age0 - 1 + k] > sim.NATURAL_DEATH[age0 - 1 + k]:
            k += 1
        cv = k - 0.5
    q = sim.NATURAL_DEATH[age0 - 1:]
    survive = np.concatenate([[1.0], np.cumprod(1 - q[:-1])])
    return qaly - 0.9 * (cv - ((np.arange(len(q)) + 0.5) * q * survive).sum()), disabled


@pytest.mark.parametrize("complication", [sim.COMPLICATION, (0.3, 0.2)])
def test_vectorised_ecm_equals_the_one_patient_reference(monkeypatch, complication):
    monkeypatch.setattr(sim, "COMPLICATION", complication)  # (0.3, 0.2): complications, cures and disability common
    rng = np.random.default_rng(3)
    n = 60
    # high cancer risk and strong drug effects visit every state; ages up to 100 hit the life table's end
    risk = rng.uniform(0.05, 0.6, n)
    aspirin, statin = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    drug = np.tile([0, 1, 2], n // 3)
    age = rng.integers(55, 101, n)
    u = sim.ECMUniforms.draw(n, rng)
    u.disability[:] = rng.uniform(0, 0.1, n)  # make the aspirin disability branch likely
    ours = sim.esophageal_cancer_qaly(risk, aspirin, statin, drug, age, uniforms=u)
    ref, disabled = zip(*[reference_qaly(risk[i], aspirin[i], statin[i], drug[i], age[i], u.natural[i],
                                         u.transition[i], u.disability[i]) for i in range(n)])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    assert any(disabled) or complication[0] < 0.01  # the frequent case must reach the disability branch
    plain = sim.esophageal_cancer_qaly(risk, aspirin, statin, drug, age, uniforms=u, control_variate=False)
    assert (plain >= 0).all() and (plain <= 46).all()


def test_ecm_covariates_come_in_drug_pairs_and_expected_lifetime_is_a_mean():
    x = sim.ecm_covariates(4, np.random.default_rng(0))
    assert x.shape == (8, 5) and x[:, 3].tolist() == [1, 2] * 4
    np.testing.assert_array_equal(x[0::2, [0, 1, 2, 4]], x[1::2, [0, 1, 2, 4]])
    assert ((55 <= x[:, 4]) & (x[:, 4] <= 80)).all()
    q = sim.NATURAL_DEATH[70 - 1:]
    p = q * np.concatenate([[1.0], np.cumprod(1 - q[:-1])])
    assert p.sum() == pytest.approx(1.0, abs=1e-12)  # death is certain by 100
    years = (np.random.default_rng(1).random((100_000, len(q))) <= q).argmax(1)
    assert sim.expected_natural_lifetime(np.array([70]))[0] == pytest.approx(years.mean() + 0.5, abs=0.05)


def test_ecm_rejects_bad_covariates():
    with pytest.raises(ValueError, match="initial age"):
        sim.esophageal_cancer_qaly([0.1], [0.1], [0.1], [1], [54], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="drug index"):
        sim.esophageal_cancer_qaly([0.1], [0.1], [0.1], [3], [60], rng=np.random.default_rng(0))
