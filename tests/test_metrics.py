import math

import numpy as np
import pytest

from fedalf_jax.experiment.metrics import fairness_angle, summarize


def test_fairness_angle_hand_computed():
    # A = (1, 0): cos = 1 / (1 * sqrt 2) -> 45 degrees
    assert float(fairness_angle([1.0, 0.0])) == pytest.approx(math.pi / 4, abs=1e-6)
    # A = (0.5, 0.5, 0.5): all equal -> 0
    assert float(fairness_angle([0.5, 0.5, 0.5])) == pytest.approx(0.0, abs=1e-3)
    # A = (0.9, 0.3): cos = 1.2 / (sqrt(0.9) * sqrt 2) = 0.894427... -> 0.463648 rad (26.565 deg)
    assert float(fairness_angle([0.9, 0.3])) == pytest.approx(0.4636476, abs=1e-5)
    # A = (1, 0, 0, 0): cos = 1/2 -> 60 degrees
    assert math.degrees(float(fairness_angle([1.0, 0, 0, 0]))) == pytest.approx(60.0, abs=1e-4)


def test_fairness_angle_zero_vector_and_batch():
    assert float(fairness_angle([0.0, 0.0])) == 0.0
    out = np.asarray(fairness_angle(np.array([[1.0, 0.0], [0.9, 0.3]])))
    np.testing.assert_allclose(out, [math.pi / 4, 0.4636476], atol=1e-5)


def test_summarize():
    acc = np.linspace(0.0, 0.9, 10)
    s = summarize(acc)
    assert s["mean_acc"] == pytest.approx(0.45)
    assert s["worst10_acc"] == pytest.approx(0.0)
    assert s["best10_acc"] == pytest.approx(0.9)
    assert s["std_acc"] == pytest.approx(np.std(acc))
    assert s["angle_deg"] == pytest.approx(math.degrees(s["angle"]))
