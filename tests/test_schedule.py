"""The run loop's schedule (issue 56 item 4: ``loop.train`` is a small schedule and the loop): after which
rounds a run evaluates, computes the train loss, checkpoints and goes on, against sets listed by hand."""

import fedalf_jax as fj
from fedalf_jax.runner.loop import Schedule


def _cfg(**kw):
    return fj.Config(**{**dict(dataset="synthetic", model="mlp", rounds=10, eval_every=3, train_loss_every=6,
                               checkpoint_every=4), **kw})


def test_evaluations_train_losses_and_checkpoints_by_round():
    s = Schedule(_cfg(), start=0)
    assert {t for t in range(1, 11) if s.evaluates(t, False)} == {3, 6, 9, 10}
    assert {t for t in range(1, 11) if s.train_loss(t)} == {6, 10}
    assert s.evaluates(4, True) and not s.evaluates(4, False)  # the round a signal cut at is evaluated
    due = []
    for t in range(1, 11):
        if s.due(t, t == 10):
            due.append(t)
            s.done(t)
    assert due == [4, 8, 10]
    assert [s.goes_on(t, True, False) for t in (0, 9, 10)] == [True, True, False]
    assert not s.goes_on(3, False, False) and not s.goes_on(3, True, True)  # no live run; a signal


def test_never_evaluates_and_a_throwaway_run_never_checkpoints():
    s = Schedule(_cfg(eval_every="never", checkpoint_every="never"), start=0)
    assert not any(s.evaluates(t, i) for t in range(1, 11) for i in (False, True))
    assert not any(s.due(t, t == 10, i) for t in range(1, 11) for i in (False, True))
