"""The tokens a tick makes when every row has fewer than tokens_per_tick left: one call of
tokens_per_tick when it costs less than the remaining tokens one call each, by what calls of
each kind have cost at that batch size (tick_costs.TickCosts)."""

from t5forge.serving.tick_costs import TickCosts


def test_a_long_budget_takes_a_multi_token_call_and_an_untimed_tail_one_token_calls():
    costs = TickCosts(8)
    assert costs.choose(8, 2) == 8
    assert costs.choose(100, 2) == 8
    assert costs.choose(5, 2) == 1  # nothing timed yet: as before
    costs.record(8, 2, 0.005)
    assert costs.choose(5, 2) == 1  # one-token calls not timed yet
    assert costs.choose(1, 2) == 1


def test_the_tail_goes_in_one_call_when_that_is_cheaper_per_batch_size():
    costs = TickCosts(8)
    # The demo model served alone: 1.45 ms per one-token call, 4.97 ms per 8-token call.
    costs.record(1, 2, 0.00145)
    costs.record(8, 2, 0.00497)
    assert [costs.choose(b, 2) for b in range(1, 8)] == [1, 1, 1, 8, 8, 8, 8]
    # A larger model: an 8-token call costs about eight one-token calls.
    costs.record(1, 8, 0.015)
    costs.record(8, 8, 0.118)
    assert [costs.choose(b, 8) for b in range(1, 8)] == [1] * 7
    assert costs.choose(5, 4) == 1  # a batch size never timed


def test_costs_follow_the_newest_calls():
    costs = TickCosts(8)
    costs.record(1, 2, 0.001)
    costs.record(8, 2, 0.010)
    assert costs.choose(7, 2) == 1  # 10 ms > 7 x 1 ms
    for _ in range(20):  # the 8-token call got cheaper (say, the machine is less loaded)
        costs.record(8, 2, 0.004)
    assert costs.choose(7, 2) == 8


def test_one_token_per_tick_is_never_exceeded():
    costs = TickCosts(1)
    costs.record(1, 2, 0.001)
    assert costs.choose(100, 2) == 1


def test_one_and_multi_token_calls_may_step_different_rows():
    costs = TickCosts(8)
    costs.record(1, 2, 0.001)  # a lone row's one-token call steps two slots (engine.step_rows)
    costs.record(8, 1, 0.003)  # and its multi-token call one
    assert costs.choose(4, 2, 1) == 8
    assert costs.choose(4, 2, 2) == 1  # no two-slot multi-token call timed yet
