"""Rounds: the shuffled job order, and the decision after a round (which points go on)."""

from batchscope.core import rounds

JOBS = [(("train", "small_cnn", b, 1, w), 0) for b in (32, 64, 128, 256) for w in (0, 2)]


def test_job_order_is_a_shuffle_fixed_by_seed_and_round():
    first = rounds.job_order(JOBS, 0, 1)
    assert sorted(first) == sorted(JOBS)
    assert rounds.job_order(list(reversed(JOBS)), 0, 1) == first  # the input order is irrelevant
    others = [rounds.job_order(JOBS, 0, r) for r in (2, 3, 4)] + [rounds.job_order(JOBS, 1, 1)]
    assert all(order != first for order in others)  # 8! orders: a repeat would be a bug


def test_priorities_run_earlier_rounds_first_and_a_round_in_its_shuffled_order():
    by_priority = sorted(
        ((job, r) for r in (1, 2, 3) for job in JOBS),
        key=lambda jr: -rounds.priority(jr[0], JOBS, 0, jr[1], 3),
    )
    assert [r for _, r in by_priority] == [1] * 8 + [2] * 8 + [3] * 8
    for r in (1, 2, 3):
        assert [job for job, rr in by_priority if rr == r] == rounds.job_order(JOBS, 0, r)
